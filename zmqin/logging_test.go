package zmqin

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvselect/kvselect/core"
)

// lockedBuf is a goroutine-safe log sink.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

// TestFlappingListenerCannotFlood: a publisher that accepts, greets and
// drops 60 connections in a row makes the listener connect and disconnect
// 60 times (120 loggable events), but the log gets the burst only; the
// rest is counted in Stats().LogsSuppressed. A first connection and the
// first disconnect are logged with the rank's identity.
func TestFlappingListenerCannotFlood(t *testing.T) {
	checkNoLeak(t)
	var logs lockedBuf
	cfg := testConfig()
	cfg.DialBackoffMin, cfg.DialBackoffMax = time.Millisecond, time.Millisecond
	cfg.DialRate = 100000
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.LogBurst, cfg.LogEvery = 4, time.Hour
	in := newIngress(t, cfg)
	peer := newRawPeer(t)
	in.Sync(7, testBlockSize, []core.RankSource{{DPRank: 1, Endpoint: peer.Endpoint()}}, newIndexSink(t))
	const flaps = 60
	for range flaps {
		c := peer.Next(t)
		_ = c.Close()
	}
	waitFor(t, "60 connections", func() bool { return in.Stats().Connects >= flaps })
	lines := logs.lines()
	if len(lines) > cfg.LogBurst {
		t.Fatalf("%d log lines from a flapping listener, want at most %d:\n%s", len(lines), cfg.LogBurst, strings.Join(lines, "\n"))
	}
	if s := in.Stats(); s.LogsSuppressed < flaps {
		t.Fatalf("LogsSuppressed %d, want at least %d", s.LogsSuppressed, flaps)
	}
	for _, want := range []string{`msg="kv listener connected" worker_id=7 dp_rank=1 endpoint=` + peer.Endpoint(), `msg="kv listener disconnected; redialing"`} {
		if !strings.Contains(strings.Join(lines, "\n"), want) {
			t.Errorf("no %q in\n%s", want, strings.Join(lines, "\n"))
		}
	}
}

// TestGapRestartAndReplayAreLogged: the events an operator acts on reach
// the log with their numbers.
func TestGapAndRestartAreLogged(t *testing.T) {
	checkNoLeak(t)
	var logs lockedBuf
	cfg := testConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	in := newIngress(t, cfg)
	peer := newRawPeer(t)
	sink := newIndexSink(t)
	in.Sync(3, testBlockSize, []core.RankSource{{Endpoint: peer.Endpoint()}}, sink)
	c := peer.Next(t)
	enc := Encoder{}
	for _, seq := range []uint64{0, 1, 5} { // 2..4 missing: a gap without replay
		if err := c.Send(rawLive(seq, enc.AppendBatch(nil, stored(0, []uint64{seq + 1}, tokens(uint32(seq*10+1), 1))))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the gap", func() bool { return in.Stats().Gaps == 1 })
	_ = c.Close()
	// A new connection whose first seq is at or below the watermark: a
	// restarted publisher (rule 1).
	c = peer.Next(t)
	if err := c.Send(rawLive(0, enc.AppendBatch(nil, stored(0, []uint64{99}, tokens(500, 1))))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the restart", func() bool { return in.Stats().Restarts == 1 })
	all := strings.Join(logs.lines(), "\n")
	for _, want := range []string{
		`level=WARN msg="kv event gap" worker_id=3 dp_rank=0`, "from_seq=2 to_seq=5 missed=3 replay=false",
		`level=WARN msg="kv publisher restart detected; rank cleared"`,
		`msg="kv listener connected"`, "watermark=5",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no %q in\n%s", want, all)
		}
	}
}
