package exporter

import (
	"runtime"
	"runtime/debug"
	"slices"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pqwatch/pqwatch/forecast"
	"github.com/pqwatch/pqwatch/record"
	"github.com/pqwatch/pqwatch/tlsparse"
)

const namespace = "pqwatch"

// Label value used for anything outside a label's fixed set.
const labelOther = "other"

// labelNone marks an absent value (no negotiated version or group).
const labelNone = "none"

// knownGroups are the group label values kept as they are
// (tlsparse.CommonGroups by name); any other group name becomes "other". An
// absent group is "none" before a ServerHello and, for a completed
// handshake, the record's group_missing: "resumed", "no_key_exchange" or
// "unknown".
var knownGroups = func() []string {
	out := make([]string, len(tlsparse.CommonGroups))
	for i, g := range tlsparse.CommonGroups {
		out[i] = g.String()
	}
	return out
}()

// missingValues are the group label values of a completed handshake
// without a group (record.GroupMissing*).
var missingValues = []string{record.GroupMissingResumed, record.GroupMissingNoKeyExchange, record.GroupMissingUnknown}

var (
	transportValues = []string{record.TransportTCP, record.TransportQUIC, labelOther}
	versionValues   = []string{"TLS1.3", "TLS1.2", "TLS1.1", "TLS1.0", labelNone, labelOther}
	outcomeValues   = []string{
		record.OutcomeOK, record.OutcomeAlert, record.OutcomeReset,
		record.OutcomeTimeout, record.OutcomeTruncated, record.OutcomeIncomplete, labelOther,
	}
	// groupValues is knownGroups followed by "none", "other" and the
	// group_missing reasons.
	groupValues = append(append(knownGroups[:len(knownGroups):len(knownGroups)], labelNone, labelOther), missingValues...)
	boolValues  = []string{"false", "true"}
)

var (
	nTransport = len(transportValues)
	nVersion   = len(versionValues)
	nGroup     = len(groupValues)
	nOutcome   = len(outcomeValues)
	groupNone  = len(knownGroups)
	groupOther = len(knownGroups) + 1
	// groupResumed, groupNoKX, groupUnknown: completed without a group.
	groupResumed = len(knownGroups) + 2
	groupNoKX    = len(knownGroups) + 3
	groupUnknown = len(knownGroups) + 4
)

// Histogram buckets.
var (
	// HelloBytesBuckets covers a classical ServerHello (~90-130 bytes), a
	// classical ClientHello (~250-600), a hybrid ServerHello (~1.2 kB) and a
	// hybrid ClientHello (~1.4-2 kB), up to a multi-share ClientHello.
	HelloBytesBuckets = []float64{64, 128, 256, 384, 512, 768, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 4096}
	// SegmentBuckets counts TCP segments or QUIC packets of one ClientHello.
	SegmentBuckets = []float64{1, 2, 3, 4, 6, 8, 12, 16}
	// RTTBuckets spans loopback to intercontinental handshakes.
	RTTBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)

// Forecast outcomes for ObserveForecast: the names of forecast's Kinds.
const (
	ForecastPQ        = "pq"
	ForecastHRR       = "hrr"
	ForecastClassical = "classical"
	ForecastLosesPQ   = "loses_pq" // PQ today, a classical group under the policy (never counted as classical)
	ForecastFail      = "fail"     // the policy shares no group with the client
)

// Log join results for LogJoin.
const (
	JoinJoined    = "joined"
	JoinUnmatched = "unmatched"
	JoinAmbiguous = "ambiguous"
	JoinMismatch  = "mismatch"
)

// Log line sources and results for LogLine.
const (
	LogSourceNginx      = "nginx"
	LogSourceNginxError = "nginx_error"
	LogSourceCaddy      = "caddy"

	LogLineOK        = "ok"        // parsed
	LogLineMalformed = "malformed" // could not be parsed
	LogLineSkipped   = "skipped"   // parsed but not a TLS request, filtered out
)

// Kafka message results for KafkaMessages.
const (
	KafkaDelivered = "delivered" // acknowledged by the broker
	KafkaFailed    = "failed"    // a delivery attempt failed; the message stays queued for retry
	KafkaSpooled   = "spooled"   // written to the disk spool because the memory queue was full
	KafkaDropped   = "dropped"   // lost: beyond the memory and spool bounds, or undeliverable at Close
)

// DefaultParseErrorReasons is the reason label set of
// pqwatch_parse_errors_total unless WithParseErrorReasons overrides it; any
// other reason is counted as "other".
var DefaultParseErrorReasons = []string{
	"truncated", "decode", "bad_record", "bad_handshake",
	"bad_client_hello", "bad_server_hello", "bad_server_key_exchange",
	"quic_initial", "quic_decrypt", "reassembly_overflow", "capture", "panic",
}

var (
	forecastValues  = []string{ForecastPQ, ForecastHRR, ForecastClassical, ForecastLosesPQ, ForecastFail}
	joinValues      = []string{JoinJoined, JoinUnmatched, JoinAmbiguous, JoinMismatch}
	logSourceValues = []string{LogSourceNginx, LogSourceNginxError, LogSourceCaddy, labelOther}
	logResultValues = []string{LogLineOK, LogLineMalformed, LogLineSkipped, labelOther}
	kafkaValues     = []string{KafkaDelivered, KafkaFailed, KafkaSpooled, KafkaDropped}
)

// MetricsOption configures NewMetrics.
type MetricsOption func(*metricsConfig)

type metricsConfig struct {
	parseReasons []string
	version      string
	revision     string
	ports        []uint16 // WithPorts
}

// WithParseErrorReasons replaces DefaultParseErrorReasons.
func WithParseErrorReasons(reasons ...string) MetricsOption {
	return func(c *metricsConfig) { c.parseReasons = reasons }
}

// WithBuildInfo sets the version and revision labels of pqwatch_build_info,
// which otherwise come from the binary's embedded build information.
func WithBuildInfo(version, revision string) MetricsOption {
	return func(c *metricsConfig) { c.version, c.revision = version, revision }
}

// Metrics holds every record-derived and agent-counter metric of SPEC.md. It
// implements record.Sink; Write does not allocate once a label combination
// has been seen. All methods are safe for concurrent use.
type Metrics struct {
	handshakes *prometheus.CounterVec
	// hs caches resolved handshake counters by a dense index over the fixed
	// label sets (transport, version, group, pq, hrr, outcome).
	hs []atomic.Pointer[prometheus.Counter]

	clientHello    [2]prometheus.Observer // by pq_offered
	serverHelloVec *prometheus.HistogramVec
	serverHello    []atomic.Pointer[prometheus.Observer] // by group index
	segments       prometheus.Histogram
	rtt            prometheus.Histogram
	pqOffered      prometheus.Counter

	forecast    map[string]prometheus.Counter
	parseErrors *sourcedCounter
	logLines    *sourcedCounter
	joins       *sourcedCounter
	kafka       map[string]prometheus.Counter
	ports       *portMetric // pqwatch_port_handshakes_total (ports.go)
	// The merge of a handshake's views (package merge): views merged,
	// late twins dropped, and what its bounds let through.
	viewsMerged, viewsLate, viewsOverflow *sourcedCounter
}

// NewMetrics creates the metrics and registers them with reg. It panics if a
// metric of the same name is already registered, like MustRegister.
func NewMetrics(reg prometheus.Registerer, opts ...MetricsOption) *Metrics {
	cfg := metricsConfig{parseReasons: DefaultParseErrorReasons}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.version == "" {
		cfg.version, cfg.revision = BuildInfo()
	}

	m := &Metrics{
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "handshakes_total",
			Help: "Handshake attempts (connections that carried a ClientHello) by transport, negotiated version and group (without one: none before a ServerHello, else resumed, no_key_exchange or unknown), PQ, HelloRetryRequest and outcome.",
		}, []string{"transport", "version", "group", "pq", "hrr", "outcome"}),
		serverHelloVec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "server_hello_bytes",
			Help:    "Size of the ServerHello that completed the exchange, 4-byte handshake header included, by negotiated group.",
			Buckets: HelloBytesBuckets,
		}, []string{"group"}),
		segments: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "client_hello_segments",
			Help:    "TCP segments or QUIC packets that carried the first ClientHello, as captured.",
			Buckets: SegmentBuckets,
		}),
		rtt: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "handshake_rtt_seconds",
			Help:    "Time from the first ClientHello byte to the first ServerHello byte at the capture point.",
			Buckets: RTTBuckets,
		}),
		pqOffered: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "pq_offered_total",
			Help: "Handshakes whose ClientHello listed a PQ or hybrid group in supported_groups.",
		}),
	}
	m.hs = make([]atomic.Pointer[prometheus.Counter], nTransport*nVersion*nGroup*2*2*nOutcome)
	m.serverHello = make([]atomic.Pointer[prometheus.Observer], nGroup)

	clientHelloVec := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "client_hello_bytes",
		Help:    "Size of the first ClientHello, 4-byte handshake header included, by whether it offered a PQ group.",
		Buckets: HelloBytesBuckets,
	}, []string{"pq_offered"})
	for i, v := range boolValues {
		m.clientHello[i] = clientHelloVec.WithLabelValues(v)
	}

	forecastVec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "forecast_handshakes_total",
		Help: "Handshakes by what they would become under the forecast server policy: pq, hrr (a HelloRetryRequest would be needed), classical, loses_pq (a PQ group today, a classical one under the policy), or fail (no group in common).",
	}, []string{"outcome"})
	m.forecast = resolveCounters(forecastVec, forecastValues)

	parseSeries := seriesOf(append(append([]string(nil), cfg.parseReasons...), labelOther))
	m.parseErrors = newSourcedCounter("parse_errors_total", "Captured input that could not be parsed, by reason.",
		[]string{"reason"}, parseSeries, func([]string) int { return len(parseSeries) - 1 })

	var lineSeries [][]string
	for _, src := range logSourceValues {
		for _, r := range logResultValues {
			lineSeries = append(lineSeries, []string{src, r})
		}
	}
	m.logLines = newSourcedCounter("log_lines_total", "Access and error log lines read, by source and result.",
		[]string{"source", "result"}, lineSeries, func(l []string) int {
			// An unknown source counts as "other", an unknown result too.
			si, ri := slices.Index(logSourceValues, l[0]), slices.Index(logResultValues, l[1])
			if si < 0 {
				si = len(logSourceValues) - 1
			}
			if ri < 0 {
				ri = len(logResultValues) - 1
			}
			return si*len(logResultValues) + ri
		})

	m.joins = newSourcedCounter("log_joins_total", "Attempts to join a handshake record with an access-log line, by result.",
		[]string{"result"}, seriesOf(joinValues), nil)

	m.viewsMerged = newSourcedCounter("handshake_views_merged_total",
		"Records merged into another record of the same handshake: views of it before and after a node's NAT, on several interfaces (the uplink, a bridge, a pod's veth).",
		nil, [][]string{{}}, nil)
	m.viewsLate = newSourcedCounter("handshake_views_late_total",
		"Views of a handshake dropped because they came after its record had left the merge (within 2 s): never a second record.",
		nil, [][]string{{}}, nil)
	m.viewsOverflow = newSourcedCounter("handshake_views_overflow_total",
		"The merge's bounds: records released before their hold because too many were held (set held), identities forgotten early because too many were remembered (set remembered; a late view of one becomes a record of its own).",
		[]string{"set"}, seriesOf([]string{ViewsHeld, ViewsRemembered}), nil)

	kafkaVec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "kafka_messages_total",
		Help: "Kafka messages by result: delivered, failed (attempt failed, kept for retry), spooled (to disk), dropped (lost).",
	}, []string{"result"})
	m.kafka = resolveCounters(kafkaVec, kafkaValues)

	buildInfoGauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help: "A metric with constant value 1 labelled by the pqwatch version, VCS revision and Go version.",
	}, []string{"version", "revision", "goversion"})
	buildInfoGauge.WithLabelValues(cfg.version, cfg.revision, runtime.Version()).Set(1)

	m.initSeries()
	m.ports = newPortMetric(cfg.ports)

	reg.MustRegister(m.ports.vec, m.handshakes, clientHelloVec, m.serverHelloVec, m.segments, m.rtt,
		m.pqOffered, forecastVec, m.parseErrors, m.logLines, m.joins, m.viewsMerged, m.viewsLate, m.viewsOverflow,
		kafkaVec, buildInfoGauge)
	return m
}

func resolveCounters(vec *prometheus.CounterVec, values []string) map[string]prometheus.Counter {
	out := make(map[string]prometheus.Counter, len(values))
	for _, v := range values {
		out[v] = vec.WithLabelValues(v)
	}
	return out
}

// initSeries creates the common handshake series at zero so that rates and
// ratios exist before the first handshake of a kind.
func (m *Metrics) initSeries() {
	common := []tlsparse.Group{tlsparse.GroupX25519, tlsparse.GroupSecp256r1, tlsparse.GroupX25519MLKEM768, tlsparse.GroupSecP256r1MLKEM768}
	for ti := range 2 { // tcp, quic
		for _, g := range common {
			gi := knownGroupIdx(uint16(g))
			pq := b2i(g.IsPQ())
			for vi := range 2 { // TLS1.3, TLS1.2
				if vi == 1 && pq == 1 {
					continue // hybrid groups are TLS 1.3 only
				}
				if ti == 1 && vi != 0 {
					continue // QUIC is TLS 1.3 only
				}
				for hrr := range 2 {
					m.handshake(ti, vi, gi, pq, hrr, 0)
				}
			}
			m.serverHelloObserver(gi)
		}
		// Failed attempts before a ServerHello: no version, no group.
		for oi := 1; oi < nOutcome-1; oi++ {
			m.handshake(ti, 4, groupNone, 0, 0, oi)
		}
	}
	// Completed without a group: resumed TLS 1.2 sessions, RSA key
	// transport, a key exchange the capture did not show.
	for _, gi := range []int{groupResumed, groupNoKX, groupUnknown} {
		m.handshake(0, 1, gi, 0, 0, 0)
	}
}

// Write implements record.Sink. It never fails and does not allocate once the
// record's label combination has been seen.
func (m *Metrics) Write(h *record.Handshake) error {
	gi := groupIdx(h)
	pq := b2i(h.PQ)
	m.handshake(transportIdx(h.Transport), versionIdx(h.Version), gi, pq, b2i(h.HRR), outcomeIdx(h.Outcome)).Inc()
	m.ports.write(h)
	if h.PQOffered {
		m.pqOffered.Inc()
	}
	if h.ClientHelloBytes > 0 {
		m.clientHello[b2i(h.PQOffered)].Observe(float64(h.ClientHelloBytes))
	}
	if h.ServerHelloBytes > 0 {
		m.serverHelloObserver(gi).Observe(float64(h.ServerHelloBytes))
	}
	if h.ClientHelloSegments > 0 {
		m.segments.Observe(float64(h.ClientHelloSegments))
	}
	if h.HandshakeRTTMicros > 0 {
		m.rtt.Observe(float64(h.HandshakeRTTMicros) / 1e6)
	}
	return nil
}

// handshake returns the counter for one label combination, resolving and
// caching it on first use.
func (m *Metrics) handshake(ti, vi, gi, pq, hrr, oi int) prometheus.Counter {
	idx := ((((ti*nVersion+vi)*nGroup+gi)*2+pq)*2+hrr)*nOutcome + oi
	if c := m.hs[idx].Load(); c != nil {
		return *c
	}
	c := m.handshakes.WithLabelValues(transportValues[ti], versionValues[vi], groupValues[gi],
		boolValues[pq], boolValues[hrr], outcomeValues[oi])
	m.hs[idx].CompareAndSwap(nil, &c)
	return c
}

func (m *Metrics) serverHelloObserver(gi int) prometheus.Observer {
	if o := m.serverHello[gi].Load(); o != nil {
		return *o
	}
	o := m.serverHelloVec.WithLabelValues(groupValues[gi])
	m.serverHello[gi].CompareAndSwap(nil, &o)
	return o
}

// ObserveForecast counts one forecast handshake; outcome is ForecastPQ,
// ForecastHRR, ForecastClassical, ForecastLosesPQ or ForecastFail. Other
// values are ignored.
func (m *Metrics) ObserveForecast(outcome string) {
	if c, ok := m.forecast[outcome]; ok {
		c.Inc()
	}
}

// ParseError counts one parse error. A reason outside the configured set is
// counted as "other".
func (m *Metrics) ParseError(reason string) { m.parseErrors.add(1, reason) }

// ParseErrorsFrom adds a source of parse errors by reason (a sniffer's own
// counters), read at every scrape.
func (m *Metrics) ParseErrorsFrom(src CounterSource) { m.parseErrors.addSource(src) }

// LogLine counts one log line by source (LogSource*) and result (LogLine*).
// Values outside those sets are counted as "other".
func (m *Metrics) LogLine(source, result string) { m.logLines.add(1, source, result) }

// LogLinesFrom adds a source of log line counts by source and result (a
// tailer's over-long lines), read at every scrape.
func (m *Metrics) LogLinesFrom(src CounterSource) { m.logLines.addSource(src) }

// Sets of pqwatch_handshake_views_overflow_total.
const (
	ViewsHeld       = "held"
	ViewsRemembered = "remembered"
)

// ViewStats are the merge's counters (merge.Stats).
type ViewStats struct {
	Merged, Late, OverflowHeld, OverflowRemembered uint64
}

// HandshakeViewsFrom adds the source of the merge's counters
// (pqwatch_handshake_views_*), read at every scrape.
func (m *Metrics) HandshakeViewsFrom(src func() ViewStats) {
	m.viewsMerged.addSource(func(add func(uint64, ...string)) { add(src().Merged) })
	m.viewsLate.addSource(func(add func(uint64, ...string)) { add(src().Late) })
	m.viewsOverflow.addSource(func(add func(uint64, ...string)) {
		st := src()
		add(st.OverflowHeld, ViewsHeld)
		add(st.OverflowRemembered, ViewsRemembered)
	})
}

// LogJoin counts one join attempt; result is one of the Join* constants.
// Other values are ignored.
func (m *Metrics) LogJoin(result string) { m.joins.add(1, result) }

// LogJoinsFrom adds a source of join results (a joiner's own counters),
// read at every scrape.
func (m *Metrics) LogJoinsFrom(src CounterSource) { m.joins.addSource(src) }

// KafkaMessages adds n to pqwatch_kafka_messages_total{result}; result is one
// of the Kafka* constants. Other values are ignored. A nil *Metrics is a
// no-op, so sinks can take an optional *Metrics.
func (m *Metrics) KafkaMessages(result string, n int) {
	if m == nil || n <= 0 {
		return
	}
	if c, ok := m.kafka[result]; ok {
		c.Add(float64(n))
	}
}

func transportIdx(s string) int {
	switch s {
	case record.TransportTCP:
		return 0
	case record.TransportQUIC:
		return 1
	}
	return 2
}

func versionIdx(s string) int {
	switch s {
	case "TLS1.3":
		return 0
	case "TLS1.2":
		return 1
	case "TLS1.1":
		return 2
	case "TLS1.0":
		return 3
	case "":
		return 4
	}
	return 5
}

func outcomeIdx(s string) int {
	switch s {
	case record.OutcomeOK:
		return 0
	case record.OutcomeAlert:
		return 1
	case record.OutcomeReset:
		return 2
	case record.OutcomeTimeout:
		return 3
	case record.OutcomeTruncated:
		return 4
	case record.OutcomeIncomplete:
		return 5
	}
	return 6
}

// groupIdx is the group label of a record: its group, or why it has none.
func groupIdx(h *record.Handshake) int {
	if h.Group == "" {
		if h.Outcome != record.OutcomeOK {
			return groupNone
		}
		switch h.GroupMissing {
		case record.GroupMissingResumed:
			return groupResumed
		case record.GroupMissingNoKeyExchange:
			return groupNoKX
		}
		return groupUnknown
	}
	return knownGroupIdx(h.GroupID)
}

// knownGroupIdx is the index in knownGroups of the group with codepoint
// g, groupOther when it is not one of them (or 0: a group without one).
func knownGroupIdx(g uint16) int {
	if g != 0 {
		for i, c := range tlsparse.CommonGroups {
			if uint16(c) == g {
				return i
			}
		}
	}
	return groupOther
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// BuildInfo is the binary's module version and VCS revision, from its
// embedded build information ("unknown" when absent).
func BuildInfo() (version, revision string) {
	version, revision = "unknown", "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version, revision
	}
	if v := bi.Main.Version; v != "" {
		version = v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			revision = s.Value
		}
	}
	return version, revision
}

// Interface check.
var _ record.Sink = (*Metrics)(nil)

// ForecastSink returns a sink that predicts what each record would become
// under policy p and counts it in m's pqwatch_forecast_handshakes_total.
func ForecastSink(m *Metrics, p forecast.Policy) record.Sink {
	return record.SinkFunc(func(h *record.Handshake) { m.ObserveForecast(forecast.Predict(p, h).Kind.String()) })
}
