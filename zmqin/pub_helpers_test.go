package zmqin_test

import (
	"testing"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/zmqin"
	"github.com/kvselect/kvselect/zmqin/zmqpub"
)

// The helpers of package zmqin's tests (helpers_test.go, export_test.go)
// under their usual names, and those that need a zmqpub.Publisher.

const testBlockSize = zmqin.TestBlockSize

var (
	newIndexSink = zmqin.NewIndexSink
	tokens       = zmqin.Tokens
	stored       = zmqin.StoredBatch
	removed      = zmqin.RemovedBatch
	waitFor      = zmqin.WaitFor
	checkNoLeak  = zmqin.CheckNoLeak
	testConfig   = zmqin.DefaultTestConfig
	newIngress   = zmqin.NewTestIngress
	freeEndpoint = zmqin.FreeEndpoint
)

const refusedEndpoint = zmqin.RefusedEndpoint

func status(in *zmqin.Ingress, id uint64) []core.RankStatus { return in.Status(id, nil) }

func newPublisher(t testing.TB, cfg zmqpub.Config) *zmqpub.Publisher {
	if cfg.Endpoint == "" {
		cfg.Endpoint = "tcp://127.0.0.1:0"
	}
	p, err := zmqpub.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func waitSubscribed(t testing.TB, p *zmqpub.Publisher, n int) {
	t.Helper()
	waitFor(t, "subscribers", func() bool { return p.Stats().Subscribers >= n })
}
