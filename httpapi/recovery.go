package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	json "github.com/goccy/go-json"
	"github.com/kvselect/kvselect/core"
)

// RecoveryConfig bounds startup index recovery from peers' /dump.
type RecoveryConfig struct {
	// Timeout bounds one peer's whole request (the reference's 10 s).
	Timeout time.Duration
	// MaxBody bounds a dump's size; a larger one fails that peer.
	MaxBody int64
}

// DefaultRecoveryConfig is the reference's 10 s per peer and a 1 GiB body.
func DefaultRecoveryConfig() RecoveryConfig {
	return RecoveryConfig{Timeout: 10 * time.Second, MaxBody: 1 << 30}
}

// Restorer is what a peer's dump is restored into: a selector
// (core.Service) or a standalone indexer (core.Indexer).
type Restorer interface {
	Restore(model, group string, blockSize uint32, events []core.Event) (int, error)
}

// Recovered is what a recovery applied.
type Recovered struct {
	// Peer is the base URL whose dump was applied; empty when none.
	Peer       string
	Partitions int
	Events     int
	// Failures are the peers tried before, with why each failed.
	Failures []string
}

// Recover rebuilds svc's index from the first peer whose GET {peer}/dump
// succeeds, trying peers in order (the reference's recovery,
// ai-dynamo/dynamo:lib/kv-router/src/services/indexer/recovery.rs): a
// non-2xx status, a body that does not parse or an event the index rejects
// fails that peer and the next is tried. A dump key is "model:group"; the
// model and group come from the entry's model_name and routing_group when
// present (kvselect's dumps carry them), else from splitting the key on its
// last ':' (the reference splits on the first, which mis-reads a model name
// with ':'; routing groups rarely have one). An empty dump is a success.
// The error is non-nil only when every peer failed.
func Recover(ctx context.Context, svc Restorer, peers []string, cfg RecoveryConfig) (Recovered, error) {
	client := &http.Client{Timeout: cfg.Timeout}
	var out Recovered
	for _, peer := range peers {
		parts, err := fetchDump(ctx, client, peer, cfg.MaxBody)
		if err == nil {
			out.Partitions, out.Events, err = restoreDump(svc, parts)
		}
		if err != nil {
			out.Failures = append(out.Failures, fmt.Sprintf("%s: %v", peer, err))
			continue
		}
		out.Peer = peer
		return out, nil
	}
	if len(peers) == 0 {
		return out, errors.New("no recovery peers")
	}
	return out, fmt.Errorf("recovery failed from every peer: %s", strings.Join(out.Failures, "; "))
}

// dumpEntry is one partition of a /dump body.
type dumpEntry struct {
	BlockSize    *uint32           `json:"block_size"`
	Events       []json.RawMessage `json:"events"`
	ModelName    *string           `json:"model_name"`
	RoutingGroup *string           `json:"routing_group"`
	Error        *string           `json:"error"`
}

// dumpPart is one parsed partition, ready to restore.
type dumpPart struct {
	model, group string
	blockSize    uint32
	events       []core.Event
}

func fetchDump(ctx context.Context, client *http.Client, peer string, maxBody int64) ([]dumpPart, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(peer, "/")+"/dump", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("peer returned status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > maxBody {
		return nil, fmt.Errorf("dump larger than %d bytes", maxBody)
	}
	var dump map[string]dumpEntry
	if err := json.Unmarshal(body, &dump); err != nil {
		return nil, fmt.Errorf("failed to parse dump response: %v", err)
	}
	parts := make([]dumpPart, 0, len(dump))
	for key, e := range dump {
		if e.Error != nil {
			return nil, fmt.Errorf("partition %s: peer could not dump it: %s", key, *e.Error)
		}
		if e.BlockSize == nil {
			return nil, fmt.Errorf("partition %s: missing block_size", key)
		}
		i := strings.LastIndexByte(key, ':')
		if i < 0 && (e.ModelName == nil || e.RoutingGroup == nil) {
			return nil, fmt.Errorf("invalid dump key format: %s", key)
		}
		p := dumpPart{blockSize: *e.BlockSize, events: make([]core.Event, 0, len(e.Events))}
		if e.ModelName != nil && e.RoutingGroup != nil {
			p.model, p.group = *e.ModelName, *e.RoutingGroup
		} else {
			p.model, p.group = key[:i], key[i+1:]
		}
		for _, raw := range e.Events {
			ev, err := core.ParseEventJSON(raw)
			if err != nil {
				return nil, fmt.Errorf("partition %s: %v", key, err)
			}
			p.events = append(p.events, ev)
		}
		parts = append(parts, p)
	}
	return parts, nil
}

func restoreDump(svc Restorer, parts []dumpPart) (partitions, events int, err error) {
	for _, p := range parts {
		n, err := svc.Restore(p.model, p.group, p.blockSize, p.events)
		if err != nil {
			return partitions, events, err
		}
		if n != len(p.events) {
			return partitions, events, fmt.Errorf("partition %s:%s: the index applied %d of %d events", p.model, p.group, n, len(p.events))
		}
		partitions++
		events += n
	}
	return partitions, events, nil
}
