package mpsc

import "testing"

// BenchmarkQueue moves bursts of 8 slices through a 100,000-item bound,
// as the replica mesh's outbound queue does: Queue against the buffered
// channel it replaced (whose ring of 100,000 slots every send walks). One
// op is one burst: 8 puts and the reader's take of them.
func BenchmarkQueue(b *testing.B) {
	const limit, burst = 100_000, 8
	item := make([]byte, 16)
	b.Run("queue", func(b *testing.B) {
		q := New[[]byte](limit)
		var got [][]byte
		for b.Loop() {
			for range burst {
				q.Put(item)
			}
			<-q.Ready()
			got = q.Take(got)
			q.Release(len(got))
		}
	})
	b.Run("chan", func(b *testing.B) {
		ch := make(chan []byte, limit)
		for b.Loop() {
			for range burst {
				select {
				case ch <- item:
				default:
				}
			}
			for range burst {
				<-ch
			}
		}
	})
}
