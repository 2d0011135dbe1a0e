package proxy

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The scans built on jsonLexer read every text, valid or not and however
// it is cut into reads, as the scans before it did (passscan_old_test.go):
// the usage tap (a JSON answer, either path, an event stream, a data line
// too long to keep whole), the owner tap and the item tap (a JSON answer
// and an event stream), compared after every read.

// addScanSeeds adds the differential targets' seeds.
func addScanSeeds(f *testing.F) {
	for _, s := range []string{
		`{"model":"e","usage":{"prompt_tokens":8,"total_tokens":8}}`,
		`{"a":"usage","b":{"usage":{"x":1}},"usage":{"prompt_tokens":1}}`,
		`{"us\u0061ge":{"prompt_tokens":1}}`,
		`{"usage":[{"prompt_tokens":1}],"usage":{"x":"}"}}`,
		`{"response":{"a":{"usage":{"x":2}},"usage":{"input_tokens":1}},"response":{"usage":{}}}`,
		`{"response":[{"usage":{}}],"usage":{"y":1}}`,
		`{"response":{"usage":null},"response":{"usage":{"a":3}}}`,
		`{"usage" "x" : {"a":1}, [] "usage":{"b":2}}`,
		`{"id":"resp_1","object":"response","output":[{"id":"msg_1","content":[{"id":"x"}]},{"id":"rs_1"}]}`,
		`{"output":[{"id":"m"}],"object":"response","id":"resp_2"}`,
		`{"a":"\"}{","object":"response","output":[{"\u0069d":"x"}]}`,
		`{"id":"` + strings.Repeat("r", 130) + `","object":"resp\"onse","id":"x"}`,
		`{"object":5,"output":[{"id":"a"}{"id" "b":"c"}]}`,
		"data: {\"item\":{\"id\":\"rs_4\"}}\n\ndata: {\"response\":{\"output\":[{\"id\":\"msg_4\"}],\"id\":\"resp_4\",\"usage\":{\"input_tokens\":2}}}\n",
		"event: x\r\ndata:{\"x\":[{]}\ndata: {\"item\":{\"id\":\"rs_5\",\"id\":\"no\"}}\r\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":{\"prompt_tokens\":1}}\n\n",
		`{"usage":{"a":"` + strings.Repeat("x", maxUsageBytes) + `"},"usage":{"b":1}}`,
		`]]}{"usage":{}}`,
	} {
		f.Add([]byte(s), uint64(len(s)), false)
		f.Add([]byte(s), uint64(3), true)
	}
}

func FuzzUsageTapDifferential(f *testing.F) {
	addScanSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte, seed uint64, long bool) {
		rng := rand.New(rand.NewPCG(seed, seed>>32))
		pieces := split(rng, body)

		// The usage tap on a JSON answer, at either path.
		for _, path := range [][]string{nil, responseUsagePath} {
			u, o := &usageTap{path: path}, &oldUsageTap{path: path}
			for _, p := range pieces {
				u.write(p)
				o.write(p)
				if u.settled() != o.settled() {
					t.Fatalf("path %q: settled %v, before %v", path, u.settled(), o.settled())
				}
			}
			if !bytes.Equal(u.found, o.found) || u.over != o.over || u.captured != o.captured || u.done != o.done {
				t.Fatalf("path %q: found %q over %v captured %v done %v; before %q %v %v %v",
					path, u.found, u.over, u.captured, u.done, o.found, o.over, o.captured, o.done)
			}
		}

		// The usage tap on an event stream: the body's lines, after one
		// data line too long to keep whole that carries the body.
		var writes [][]byte
		if long {
			writes = append(writes, []byte("data:"))
			for range maxUsageLine / 4096 {
				writes = append(writes, []byte(strings.Repeat(" ", 4096)))
			}
			writes = append(writes, split(rng, bytes.ReplaceAll(body, []byte("\n"), []byte(" ")))...)
			writes = append(writes, []byte("\n"))
		}
		u, o := &usageTap{sse: true}, &oldUsageTap{sse: true}
		for _, p := range append(writes, split(rng, body)...) {
			u.write(p)
			o.write(p)
		}
		uu, uok := u.usage()
		ou, ook := o.usage()
		if !bytes.Equal(u.found, o.found) || u.over != o.over || u.text != o.text || uu != ou || uok != ook {
			t.Fatalf("stream: found %q over %v text %d; before %q %v %d", u.found, u.over, u.text, o.found, o.over, o.text)
		}
	})
}

func FuzzOwnerTapDifferential(f *testing.F) {
	addScanSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte, seed uint64, _ bool) {
		pieces := split(rand.New(rand.NewPCG(seed, seed>>32)), body)
		for _, sse := range []bool{false, true} {
			ot := newOwnerTap([]byte("application/json"))
			oo := &oldOwnerTap{}
			if sse {
				ot = newOwnerTap([]byte("text/event-stream"))
				oo = &oldOwnerTap{sse: true, sc: oldIDScan{in: "response"}}
			}
			for k, p := range pieces {
				id, ok := ot.write(p)
				oid, ook := oo.write(p)
				if id != oid || ok != ook || ot.pending() != oo.pending() {
					t.Fatalf("owner (sse %v) read %d: %q %v pending %v; before %q %v %v", sse, k, id, ok, ot.pending(), oid, ook, oo.pending())
				}
			}
		}
	})
}

func FuzzItemTapDifferential(f *testing.F) {
	addScanSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte, seed uint64, _ bool) {
		rng := rand.New(rand.NewPCG(seed, seed>>32))
		pieces := split(rng, body)
		spendAt := rng.IntN(len(pieces) + 1)
		for _, sse := range []bool{false, true} {
			// The item tap, told at one read that the answer's bytes went
			// out (spend).
			it, oi := newItemTap(sse), newOldItemTap(sse)
			for k, p := range pieces {
				if k == spendAt {
					it.spend()
					oi.spend()
				}
				ids, oids := it.write(p), oi.write(p)
				if !slices.Equal(ids, oids) || it.pending() != oi.pending() || it.stopped != oi.stopped {
					t.Fatalf("items (sse %v) read %d: %q pending %v; before %q %v", sse, k, ids, it.pending(), oids, oi.pending())
				}
			}
		}
	})
}

// split cuts b into pieces of random sizes, some of them empty.
func split(rng *rand.Rand, b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := min(len(b), rng.IntN(9))
		if rng.IntN(8) == 0 {
			n = min(len(b), rng.IntN(len(b)+1)) // a long one
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}
