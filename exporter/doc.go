// Package exporter holds pqwatch's sinks for handshake records
// (record.Sink): Prometheus metrics (Metrics, NewCaptureCollector, Handler),
// a JSON Lines writer (JSONL) and a Kafka producer (Kafka) with a bounded
// memory queue, an optional disk spool and optional per-minute rollups; and
// the feed's reader for pqwatch plan (ReadFeed: a topic from a time to its
// end offsets, by partition, without a consumer group).
//
// Every sink is safe for concurrent use. Nothing here uses the global
// Prometheus registry: callers build one with prometheus.NewRegistry and pass
// it in. Label values are drawn from fixed sets so that series cardinality is
// bounded whatever the traffic looks like.
package exporter

import "errors"

// Sentinel errors. Functions wrap them with %w and the package name.
var (
	// ErrClosed is returned by Write after Close.
	ErrClosed = errors.New("exporter: sink closed")
	// ErrDropped is returned by (*Kafka).Write when the record did not fit in
	// the memory queue nor in the disk spool. The drop is already counted in
	// pqwatch_kafka_messages_total{result="dropped"}; callers should treat
	// it as non-fatal.
	ErrDropped = errors.New("exporter: record dropped, buffer full")
	// ErrConfig is wrapped by constructors that reject their configuration.
	ErrConfig = errors.New("exporter: invalid config")
	// ErrSpoolCorrupt is wrapped when a spool segment holds a damaged frame.
	ErrSpoolCorrupt = errors.New("exporter: spool segment corrupt")
)
