package logparse

// DiscoverFormat returns the candidate under which most of the sample
// lines parse (the earlier candidate on a tie) and how many did; nil and 0
// when none parses a single line. Empty lines are not counted. It is how an
// access log copied away from the path its nginx.conf names finds its
// log_format: every format of the conf is tried on the log's own lines.
// A container log's lines (CRI, Docker json-file) are unwrapped first.
func DiscoverFormat(sample [][]byte, candidates []*Format) (best *Format, parsed int) {
	sample = UnwrapSample(sample)
	var l NginxLine
	for _, f := range candidates {
		n := 0
		for _, line := range sample {
			if len(line) > 0 && f.Parse(line, &l) == nil {
				n++
			}
		}
		if n > parsed {
			best, parsed = f, n
		}
	}
	return best, parsed
}

// Candidates are the formats of a conf in the order they were defined,
// combined included, for DiscoverFormat.
func (c *NginxConfig) Candidates() []*Format {
	out := make([]*Format, 0, len(c.Order))
	for _, name := range c.Order {
		if f := c.Formats[name]; f != nil {
			out = append(out, f)
		}
	}
	return out
}
