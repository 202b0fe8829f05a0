package zmqin

import (
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/kvselect/kvselect/zmqin/zmtp"
)

// Config configures an Ingress. The zero Config is valid: every zero field
// takes the default named beside it.
type Config struct {
	// Writers is the number of writer goroutines that apply decoded events
	// to sinks; a worker always maps to the same writer. 0 means
	// DefaultWriters().
	Writers int
	// QueueLimit is the number of received messages one rank may hold
	// queued or being processed (decode, sequence checks, replay). A
	// message arriving at a full queue is dropped and counted (Overflow);
	// the listener then sees a sequence gap. The queue (32 bytes a slot)
	// exists only while the rank is connected. 0 means 1024.
	QueueLimit int
	// MaxQueueBytes bounds the payload bytes one rank's queue holds, and
	// MaxTotalQueueBytes those of every rank's queue together (a message
	// counts from the moment it is queued until its listener is done
	// with it). A message that would exceed either is dropped like one
	// arriving at a full queue (Overflow, then a gap). Without them a
	// rank's queue could hold QueueLimit messages of MaxMessageSize each
	// (64 GiB); forty 53 MiB batches took a process to 4.7 GB. 0 means
	// 64 MiB per rank: one message of the default MaxMessageSize fits,
	// and so do hundreds of the largest batches an engine step publishes
	// (the stores of at most max_num_batched_tokens tokens, typically 8
	// to 64 Ki, about 5 bytes each: a few hundred KiB). 0 means 256 MiB in
	// total, four ranks at their limit: the queues stay a small part of a
	// selector's memory whatever the number of ranks, and a burst beyond
	// them becomes gaps, which replay heals where the worker has a replay
	// endpoint. MaxQueueBytes must be at least MaxMessageSize, and
	// MaxTotalQueueBytes at least MaxQueueBytes.
	MaxQueueBytes, MaxTotalQueueBytes int
	// WriterQueue is the number of decoded batches a writer may have
	// pending; a listener blocks when its writer's queue is full, and
	// then its own queue fills. 0 means 256.
	WriterQueue int
	// MaxWriterQueueBytes bounds the memory of the decoded batches one
	// writer holds (queued, or in the run it is applying): a listener
	// whose batch would pass it waits, as on a full WriterQueue. A batch
	// enters an empty writer queue whatever its size, so one message of
	// MaxMessageSize always gets through. Decoded events are larger than
	// their msgpack (about 100 bytes an event, 16 a block, against 15 to
	// 40 on the wire), so without this bound WriterQueue batches of big
	// messages could hold gigabytes after their payload bytes left
	// MaxQueueBytes. 0 means 64 MiB.
	MaxWriterQueueBytes int
	// MaxApplyEvents caps the events a writer passes to one
	// EventSink.ApplyBatch call when it coalesces consecutive batches of
	// one sink. 0 means 4096.
	MaxApplyEvents int
	// DialBackoffMin and DialBackoffMax bound the wait before a listener
	// redials its endpoint after a failed dial or a lost connection; the
	// wait doubles from Min up to Max, less up to half of it (jitter). A
	// listener's first dial is immediate, and its first redial after a
	// connection that delivered a message waits Min at most. 0 means 50ms
	// and 5s.
	DialBackoffMin, DialBackoffMax time.Duration
	// DialRate caps the redials per second of all listeners together
	// after failures (a failed dial, or a connection that delivered
	// nothing): once its backoff has elapsed, such a listener waits for
	// the next free slot of the Ingress's dial pacer (a burst of one
	// second's worth passes at once). With few unreachable endpoints it
	// never waits; with
	// more than DialRate x DialBackoffMax, each is retried about every
	// (unreachable ranks / DialRate) seconds instead of every
	// DialBackoffMax. 0 means 200 a second. BenchmarkRedialCPU, 2 shared
	// cores: 10,000 unreachable ranks redialed 2,779 times a second for
	// 19% of a core without pacing; paced, 200 a second cost 4.6-5.8%.
	DialRate int
	// ReplayTimeout bounds the dial of a replay endpoint and each read of
	// a replay reply; a replay that times out ends and live processing
	// resumes. 0 means 5s.
	ReplayTimeout time.Duration
	// MaxFrameSize is the largest ZMTP frame a listener accepts, and
	// MaxMessageSize the largest message (its frames together; a live
	// message also has at most 3 frames, a replay reply 4). A peer that
	// breaks a limit loses its connection at the header of the frame that
	// breaks it, before anything is allocated for that frame (counted in
	// RecvErrors and by reason, e.g. TooManyFrames), and is redialed after
	// the dial backoff. Each listener holds at most one message it is
	// reading. 0 means 64 MiB for both.
	MaxFrameSize, MaxMessageSize int
	// Logger receives the listeners' state changes (logging.go); nil
	// discards them. Each rank listener logs at most LogBurst lines at
	// once, then one per LogEvery (a line after suppressed ones says how
	// many). 0 means 10 lines and 10s.
	Logger   *slog.Logger
	LogBurst int
	LogEvery time.Duration
}

// Frames per message: a live KV event message is [topic, seq, payload]; a
// replay reply ["", seq, payload] or ["", topic, seq, payload].
const (
	liveFrames   = 3
	replayFrames = 4
)

func (in *Ingress) liveLimits() zmtp.Limits {
	return zmtp.Limits{MaxFrames: liveFrames, MaxFrameSize: in.cfg.MaxFrameSize, MaxMessageSize: in.cfg.MaxMessageSize}
}

func (in *Ingress) replayLimits() zmtp.Limits {
	return zmtp.Limits{MaxFrames: replayFrames, MaxFrameSize: in.cfg.MaxFrameSize, MaxMessageSize: in.cfg.MaxMessageSize}
}

// nextBackoff returns the wait before the dial after one that waited b:
// DialBackoffMin after none, then doubling up to DialBackoffMax.
func (in *Ingress) nextBackoff(b time.Duration) time.Duration {
	if b == 0 {
		return in.cfg.DialBackoffMin
	}
	return min(2*b, in.cfg.DialBackoffMax)
}

// DefaultWriters is the writer count used when Config.Writers is 0: one per
// two procs, at least one (one on the 2-proc machines measured here). The
// index does not follow GOMAXPROCS: radix.DefaultShards is 1, so on a
// machine of 4 or more procs several writers share each partition index's
// one writer lock, and more writers pay off only across partitions (one
// index per block size) or with more shards (core.Config.IndexShards); on
// 2 cores radix measured two writers on one shard at half the block ops/s
// of one (BenchmarkMixed). A CPU profile of BenchmarkEndToEnd (4-block
// batches, 2 procs) puts the writers' index work at about 13% of the CPU
// against 11% for reading frames and 12% for decoding, so the writer is
// not the bottleneck of one rank.
func DefaultWriters() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// Validate reports a Config that cannot work.
func (c Config) Validate() error {
	if c.Writers < 0 || c.Writers > 1024 || c.QueueLimit < 0 || c.WriterQueue < 0 || c.MaxWriterQueueBytes < 0 || c.MaxApplyEvents < 0 || c.MaxFrameSize < 0 || c.MaxMessageSize < 0 {
		return fmt.Errorf("zmqin: invalid config: negative or huge count in %+v", c)
	}
	if c.DialBackoffMin < 0 || c.DialBackoffMax < 0 || c.ReplayTimeout < 0 || c.DialRate < 0 || c.LogBurst < 0 || c.LogEvery < 0 {
		return fmt.Errorf("zmqin: invalid config: negative duration in %+v", c)
	}
	if c.DialBackoffMax != 0 && c.DialBackoffMin > c.DialBackoffMax {
		return fmt.Errorf("zmqin: invalid config: DialBackoffMin %v > DialBackoffMax %v", c.DialBackoffMin, c.DialBackoffMax)
	}
	if c.MaxQueueBytes < 0 || c.MaxTotalQueueBytes < 0 {
		return fmt.Errorf("zmqin: invalid config: negative queue bytes in %+v", c)
	}
	if d := c.withDefaults(); d.MaxQueueBytes < d.MaxMessageSize || d.MaxTotalQueueBytes < d.MaxQueueBytes {
		return fmt.Errorf("zmqin: invalid config: need MaxMessageSize %d <= MaxQueueBytes %d <= MaxTotalQueueBytes %d",
			d.MaxMessageSize, d.MaxQueueBytes, d.MaxTotalQueueBytes)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Writers == 0 {
		c.Writers = DefaultWriters()
	}
	if c.QueueLimit == 0 {
		c.QueueLimit = 1024
	}
	if c.WriterQueue == 0 {
		c.WriterQueue = 256
	}
	if c.MaxWriterQueueBytes == 0 {
		c.MaxWriterQueueBytes = 64 << 20
	}
	if c.MaxApplyEvents == 0 {
		c.MaxApplyEvents = 4096
	}
	if c.DialBackoffMin == 0 {
		c.DialBackoffMin = 50 * time.Millisecond
	}
	if c.DialBackoffMax == 0 {
		c.DialBackoffMax = 5 * time.Second
	}
	if c.DialBackoffMax < c.DialBackoffMin {
		c.DialBackoffMax = c.DialBackoffMin
	}
	if c.DialRate == 0 {
		c.DialRate = 200
	}
	if c.ReplayTimeout == 0 {
		c.ReplayTimeout = 5 * time.Second
	}
	if c.MaxFrameSize == 0 {
		c.MaxFrameSize = 64 << 20
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = 64 << 20
	}
	if c.MaxQueueBytes == 0 {
		c.MaxQueueBytes = 64 << 20
	}
	if c.MaxTotalQueueBytes == 0 {
		c.MaxTotalQueueBytes = 256 << 20
	}
	if c.Logger == nil {
		c.Logger = discard
	}
	if c.LogBurst == 0 {
		c.LogBurst = 10
	}
	if c.LogEvery == 0 {
		c.LogEvery = 10 * time.Second
	}
	return c
}
