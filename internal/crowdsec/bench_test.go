package crowdsec

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
)

// startupAnswer is a startup answer as the LAPI writes it: n decisions,
// a quarter each IPv4 address, IPv4 range, IPv6 address, IPv6 range.
func startupAnswer(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"deleted":null,"new":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		var scope, value string
		switch i % 4 {
		case 0:
			scope, value = "Ip", fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		case 1:
			scope, value = "Range", fmt.Sprintf("%d.%d.%d.0/24", 100+i>>16, i>>8&255, i&255)
		case 2:
			scope, value = "Ip", fmt.Sprintf("2001:db8::%x:%x", i>>16, i&0xffff)
		default:
			scope, value = "Range", fmt.Sprintf("2001:db8:%x:%x::/64", i>>16, i&0xffff)
		}
		fmt.Fprintf(&b, `{"duration":"3h59m58.795288745s","id":%d,"origin":"lists","scenario":"firehol_level1","scope":"%s","type":"ban","value":"%s"}`, i+1, scope, value)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// BenchmarkDecodeStartup100k parses a startup answer of 100,000 decisions
// (half Ip, half Range, both families). B/op is everything allocated; the
// "kept-MB" metric is the heap still held by the result.
func BenchmarkDecodeStartup100k(b *testing.B) {
	const n = 100_000
	body := startupAnswer(n)
	c, err := New(Config{URL: "http://127.0.0.1:8080/", APIKey: "k", MaxDecisions: n})
	if err != nil {
		b.Fatal(err)
	}
	kept := keptBytes(c, body)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := c.decode(bytes.NewReader(body), true)
		if err != nil {
			b.Fatal(err)
		}
		if len(d.New) != n {
			b.Fatalf("kept %d decisions, want %d", len(d.New), n)
		}
	}
	b.ReportMetric(float64(kept)/(1<<20), "kept-MB")
}

// keptBytes is the heap a decoded answer holds once the garbage is collected.
func keptBytes(c *Client, body []byte) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	d, _ := c.decode(bytes.NewReader(body), true)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(d)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// TestDecodeMemory checks decoding 100,000 decisions allocates and keeps
// what the package doc states: gathered in blocks, not grown by append.
func TestDecodeMemory(t *testing.T) {
	const n = 100_000
	body := startupAnswer(n)
	c, err := New(Config{URL: "http://127.0.0.1:8080/", APIKey: "k", MaxDecisions: n})
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	d, err := c.decode(bytes.NewReader(body), true)
	runtime.ReadMemStats(&after)
	if err != nil || len(d.New) != n {
		t.Fatalf("decoded %d decisions, err %v; want %d", len(d.New), err, n)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %.1f MB, kept %.1f MB", float64(allocated)/(1<<20), float64(keptBytes(c, body))/(1<<20))
	if allocated > 40<<20 {
		t.Errorf("decoding %d decisions allocated %d bytes, want at most 40 MiB", n, allocated)
	}
	if kept := keptBytes(c, body); kept > 20<<20 {
		t.Errorf("%d decisions keep %d bytes, want at most 20 MiB", n, kept)
	}
}
