package exporter

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

// sampleRecord returns a complete hybrid TLS 1.3 record.
func sampleRecord() *record.Handshake {
	return &record.Handshake{
		TS:                  time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC),
		Transport:           record.TransportTCP,
		Client:              "192.0.2.10:51234",
		Server:              "198.51.100.1:443",
		SNI:                 "www.example.com",
		ALPN:                []string{"h2", "http/1.1"},
		OfferedGroups:       []string{"X25519MLKEM768", "x25519", "secp256r1"},
		KeyShares:           []record.KeyShare{{Group: "X25519MLKEM768", Bytes: 1216}, {Group: "x25519", Bytes: 32}},
		PQOffered:           true,
		Version:             "TLS1.3",
		Cipher:              "TLS_AES_128_GCM_SHA256",
		Group:               "X25519MLKEM768",
		GroupID:             uint16(tlsparse.GroupX25519MLKEM768),
		PQ:                  true,
		ClientHelloBytes:    1751,
		ServerHelloBytes:    1210,
		ClientHelloSegments: 2,
		Outcome:             record.OutcomeOK,
		HandshakeRTTMicros:  850,
		JA4:                 "t13d1516h2_8daaf6152771_02713d6af862",
		Log:                 &record.Log{Source: "nginx", Status: 200, Method: "GET", Host: "www.example.com", Path: "/", PID: 1234, SSLCurve: "X25519MLKEM768"},
		Generation:          &record.Generation{ID: "g1", MasterPID: 100, WorkerPID: 1234, Exe: "/usr/sbin/nginx"},
	}
}

func prometheusRegistry() *prometheus.Registry { return prometheus.NewRegistry() }

func counterValue(c prometheus.Counter) float64 { return testutil.ToFloat64(c) }
