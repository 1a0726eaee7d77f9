package loadgen

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Arrival names an arrival process for the open-loop schedule.
type Arrival string

// Arrival processes.
const (
	// ArrivalConstant sends exactly one request every 1/rate seconds.
	ArrivalConstant Arrival = "constant"
	// ArrivalPoisson draws exponential inter-arrival gaps with mean 1/rate,
	// so the count in a window is Poisson distributed (it varies by
	// sqrt(rate*duration) around its mean).
	ArrivalPoisson Arrival = "poisson"
)

// ParseArrival checks an arrival process name.
func ParseArrival(s string) (Arrival, error) {
	switch a := Arrival(s); a {
	case ArrivalConstant, ArrivalPoisson:
		return a, nil
	}
	return "", fmt.Errorf("%w: arrival %q (want constant or poisson)", ErrUsage, s)
}

// Schedule yields the intended send times of an open-loop load, as offsets
// from the start of a trial. It never looks at responses: how fast the
// server answers cannot change when the next request is due, which is what
// makes latency measured from these intended times free of coordinated
// omission.
type Schedule struct {
	arrival Arrival
	gap     float64 // mean gap in nanoseconds
	rng     *rand.Rand
	next    float64 // nanoseconds
	i       int64
	end     time.Duration
}

// NewSchedule returns a schedule of arrivals at rate per second for the
// span [0, end). seed makes a Poisson schedule reproducible.
func NewSchedule(arrival Arrival, rate float64, end time.Duration, seed uint64) (*Schedule, error) {
	if !(rate > 0) {
		return nil, fmt.Errorf("%w: rate must be > 0, got %v", ErrUsage, rate)
	}
	if _, err := ParseArrival(string(arrival)); err != nil {
		return nil, err
	}
	s := &Schedule{
		arrival: arrival,
		gap:     float64(time.Second) / rate,
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		end:     end,
	}
	if arrival == ArrivalPoisson {
		s.next = s.rng.ExpFloat64() * s.gap
	}
	return s, nil
}

// Next returns the next intended offset, or false when the span is over.
func (s *Schedule) Next() (time.Duration, bool) {
	t := time.Duration(s.next)
	if t >= s.end {
		return 0, false
	}
	switch s.arrival {
	case ArrivalPoisson:
		s.next += s.rng.ExpFloat64() * s.gap
	default:
		s.i++ // i*gap, not repeated addition: no drift over long trials
		s.next = float64(s.i) * s.gap
	}
	return t, true
}
