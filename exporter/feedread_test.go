package exporter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestReadFeed: a topic of 3 partitions holds 10 messages stamped two days
// ago and 20 stamped now. ReadFeed with Since a day ago reads the 20, each
// once, from every partition; without Since, all 30; a message produced
// after the read began is not read (the end offsets are those of the
// start). An empty topic reads nothing without error; a missing topic is
// ErrNoTopic and is not created. No consumer group is joined.
func TestReadFeed(t *testing.T) {
	c := startBroker(t, 0, "", "feed", "empty")
	t.Cleanup(c.Close)
	w := &kafka.Writer{Addr: kafka.TCP(c.ListenAddrs()...), Topic: "feed", Balancer: &kafka.RoundRobin{}, BatchTimeout: 10 * time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	now := time.Now()
	var msgs []kafka.Message
	for i := range 30 {
		ts := now
		if i < 10 {
			ts = now.Add(-48 * time.Hour)
		}
		msgs = append(msgs, kafka.Message{Value: fmt.Appendf(nil, "m%02d", i), Time: ts})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs[:10]...); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteMessages(ctx, msgs[10:]...); err != nil {
		t.Fatal(err)
	}
	read := func(since time.Time, during func()) ([]string, FeedStats) {
		t.Helper()
		var got []string
		st, err := ReadFeed(ctx, FeedReadConfig{Brokers: c.ListenAddrs(), Topic: "feed", Since: since, IdleTimeout: 5 * time.Second}, func(m kafka.Message) error {
			if during != nil {
				during()
				during = nil
			}
			got = append(got, string(m.Value))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got, st
	}
	got, st := read(now.Add(-24*time.Hour), nil)
	var want []string
	for _, m := range msgs[10:] {
		want = append(want, string(m.Value))
	}
	if !slices.Equal(got, want) || st.Messages != 20 || len(st.Partitions) != 3 {
		t.Errorf("since a day ago: %v (%+v), want %v", got, st, want)
	}
	for _, p := range st.Partitions {
		if p.Read == 0 || p.Read != p.End-p.Start {
			t.Errorf("partition %+v", p)
		}
	}
	// From the earliest offset; a message written during the read is left.
	got, st = read(time.Time{}, func() {
		if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("late")}); err != nil {
			t.Error(err)
		}
	})
	if len(got) != 30 || slices.Contains(got, "late") || st.Messages != 30 {
		t.Errorf("whole topic: %d messages %v, want the 30 of before the read", len(got), got)
	}
	if st, err := ReadFeed(ctx, FeedReadConfig{Brokers: c.ListenAddrs(), Topic: "empty"}, func(kafka.Message) error { return nil }); err != nil || st.Messages != 0 || len(st.Partitions) != 3 {
		t.Errorf("empty topic: %+v, %v", st, err)
	}
	if _, err := ReadFeed(ctx, FeedReadConfig{Brokers: c.ListenAddrs(), Topic: "nope"}, func(kafka.Message) error { return nil }); !errors.Is(err, ErrNoTopic) {
		t.Errorf("missing topic: %v, want ErrNoTopic", err)
	}
	conn, err := kafka.Dial("tcp", c.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	parts, _ := conn.ReadPartitions()
	for _, p := range parts {
		if p.Topic == "nope" {
			t.Errorf("ReadFeed created the topic it was asked to read")
		}
	}
	cl := &kafka.Client{Addr: kafka.TCP(c.ListenAddrs()...)}
	if groups, err := cl.ListGroups(ctx, &kafka.ListGroupsRequest{}); err != nil || len(groups.Groups) != 0 {
		t.Errorf("consumer groups after the reads: %+v, %v", groups, err)
	}
}
