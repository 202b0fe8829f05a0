package radix

import (
	"testing"
)

// FuzzIndex feeds arbitrary event sequences, decoded from the fuzzer's
// bytes, to the index and to the naive model, and checks after every event
// that the index's invariants hold and that it matches like the model.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{0, 1, 0, 3, 1, 2, 3, 9, 1, 0, 1})
	f.Add([]byte{0, 1, 0, 2, 1, 1, 0, 2, 0, 2, 1, 2, 7, 1, 1, 0, 1, 2})
	f.Add([]byte{0, 2, 1, 4, 1, 2, 3, 4, 0, 2, 2, 4, 1, 2, 9, 9, 2, 2, 0, 5, 3, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 512 {
			return
		}
		ix, _ := New(Config{Shards: 2})
		m := newModel()
		var r Result
		rd := byteReader{data: data}
		for !rd.done() {
			ev := rd.event(m)
			ix.Apply(&ev)
			m.apply(&ev)
			if err := checkIndex(ix); err != nil {
				t.Fatalf("after %+v: %v", ev, err)
			}
			q := make([]uint64, 0, 8)
			for range rd.next() % 8 {
				q = append(q, uint64(1+rd.next()%4))
			}
			if err := compareMatch(ix, m, q, &r); err != nil {
				t.Fatal(err)
			}
			if st := ix.Stats(); st.Dropped != m.drops || st.Blocks != m.blocks() {
				t.Fatalf("stats %+v, model drops %v blocks %v", st, m.drops, m.blocks())
			}
		}
	})
}

// byteReader turns fuzz bytes into events over a small universe, so that
// random bytes hit shared prefixes, splits, parents and conflicts often.
type byteReader struct {
	data []byte
	pos  int
}

func (b *byteReader) done() bool { return b.pos >= len(b.data) }

func (b *byteReader) next() byte {
	if b.pos >= len(b.data) {
		return 0
	}
	b.pos++
	return b.data[b.pos-1]
}

func (b *byteReader) event(m *model) Event {
	op := b.next()
	ev := Event{Worker: WorkerKey{WorkerID: uint64(b.next() % 3), DPRank: uint32(op>>4) % 2}}
	ev.Tier = Tier((op >> 2) % 8 % uint8(numTiers+1)) // numTiers itself: an unknown tier
	switch op % 4 {
	case 0, 1:
		ev.Kind = Stored
		if p := b.next(); p%3 != 0 {
			ev.HasParent, ev.ParentHash = true, uint64(p%16)
		}
		for range 1 + b.next()%5 {
			ev.Blocks = append(ev.Blocks, Block{Hash: uint64(b.next() % 16), Local: uint64(1 + b.next()%4)})
		}
	case 2:
		ev.Kind = Removed
		for range 1 + b.next()%3 {
			ev.Hashes = append(ev.Hashes, uint64(b.next()%16))
		}
	default:
		ev.Kind = EventKind(b.next()%5) + Cleared // Cleared or an unknown kind
	}
	return ev
}
