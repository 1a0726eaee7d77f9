// Command gencap writes a capture of real TLS handshakes (package pcapgen):
// the testdata capture, the demo's fallback and benchmark inputs.
//
//	go run ./internal/gencap -o testdata/handshakes.pcap -n 50
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/pqwatch/pqwatch/pcapgen"
)

func main() {
	out := flag.String("o", "handshakes.pcap", "output pcap `file`")
	n := flag.Int("n", 50, "number of connections")
	bulk := flag.Int("bulk", 0, "bytes of application data per connection after the handshake")
	mss := flag.Int("mss", 1460, "TCP MSS of the synthesised segments")
	flag.Parse()
	f, err := os.Create(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	clients := pcapgen.DefaultClients(*n)
	for i := range clients {
		clients[i].BulkBytes = *bulk
	}
	res, err := pcapgen.Generate(context.Background(), w, pcapgen.Config{
		ServerCurves: pcapgen.DemoServerCurves,
		Clients:      clients, MSS: *mss,
	})
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	hrr := 0
	for _, r := range res {
		if r.HRR {
			hrr++
		}
	}
	fmt.Fprintf(os.Stderr, "wrote %s: %d connections, %d with HelloRetryRequest\n", *out, len(res), hrr)
}
