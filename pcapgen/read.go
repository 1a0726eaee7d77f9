package pcapgen

import (
	"io"

	"github.com/gopacket/gopacket/pcapgo"
)

// NewReaderForTest reads back a capture written by Generate.
func NewReaderForTest(r io.Reader) (*pcapgo.Reader, error) { return pcapgo.NewReader(r) }
