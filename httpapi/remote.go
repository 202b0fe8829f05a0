package httpapi

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi/internal/jsonscan"
	"github.com/valyala/fasthttp"
)

// RemoteIndexConfig configures a RemoteIndex.
type RemoteIndexConfig struct {
	// URL is the standalone indexer's base URL, http:// or https://.
	URL string
	// Timeout is each call's deadline, connection included: a call that
	// cannot finish by then fails (the selection answers 503) instead of
	// waiting. The reference's client uses 5 s.
	Timeout time.Duration
	// MaxConns bounds the pooled keep-alive connections to the indexer; a
	// call that finds them all busy waits for one until its deadline.
	MaxConns int
}

// DefaultRemoteIndexTimeout is the reference's RemoteIndexerTransport
// timeout (ai-dynamo/dynamo:lib/kv-router/src/services/indexer/backend.rs).
const DefaultRemoteIndexTimeout = 5 * time.Second

// RemoteIndexConnectTimeout bounds the TCP connect to the indexer within a
// call's deadline: an indexer that does not accept is offline after 2 s
// (the selection answers 503), as the reference's client connects
// (ai-dynamo/dynamo 9493e06e2b: "an unreachable remote indexer maps to 503
// not_ready, with a 2 s connect timeout"). A var for tests.
var RemoteIndexConnectTimeout = 2 * time.Second

// DefaultRemoteIndexConns bounds the connections to the indexer by default.
const DefaultRemoteIndexConns = 256

// RemoteIndex is core.PrimaryIndex over a standalone indexer's POST
// /query_tiered_by_hash (the reference's RemoteIndexerClient): one call per
// selection, on pooled keep-alive connections, with a deadline. Any
// failure (connection refused, deadline, non-2xx status, a body that does
// not decode) is an error, which core answers as not ready ("Indexer is
// offline"), as the reference does; Stats counts them by cause.
type RemoteIndex struct {
	hc      *fasthttp.HostClient
	uri     string // full URL of the route
	host    string
	timeout time.Duration

	bufs sync.Pool // *remoteBuf

	ok, refused, deadline, status, decode atomic.Uint64
}

type remoteBuf struct {
	body []byte
	s    jsonscan.Scanner
}

// NewRemoteIndex validates cfg and returns the client. It does not dial.
func NewRemoteIndex(cfg RemoteIndexConfig) (*RemoteIndex, error) {
	base := strings.TrimRight(cfg.URL, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("remote indexer URL must start with http:// or https://: %s", base)
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("remote indexer URL %q is not a URL", base)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultRemoteIndexTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultRemoteIndexConns
	}
	addr := u.Host
	if u.Port() == "" {
		addr += map[bool]string{true: ":443", false: ":80"}[u.Scheme == "https"]
	}
	r := &RemoteIndex{
		uri: base + "/query_tiered_by_hash", host: u.Host, timeout: cfg.Timeout,
		hc: &fasthttp.HostClient{
			Addr:                     addr,
			Name:                     "kvselect",
			NoDefaultUserAgentHeader: true,
			IsTLS:                    u.Scheme == "https",
			MaxConns:                 cfg.MaxConns,
			MaxConnWaitTimeout:       cfg.Timeout,
			MaxIdleConnDuration:      time.Minute,
			MaxResponseBodySize:      64 << 20,
			DisablePathNormalizing:   true,
			// The dial gets at most RemoteIndexConnectTimeout of the
			// call's deadline (fasthttp passes DialTimeout the time the
			// request has left).
			DialTimeout: func(addr string, left time.Duration) (net.Conn, error) {
				return fasthttp.DialTimeout(addr, min(left, RemoteIndexConnectTimeout))
			},
		},
	}
	if r.hc.IsTLS {
		r.hc.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	r.bufs.New = func() any { return new(remoteBuf) }
	return r, nil
}

// Close drops the idle connections.
func (r *RemoteIndex) Close() { r.hc.CloseIdleConnections() }

var errRemoteStatus = errors.New("remote indexer returned an error status")

// MatchPrefix asks the indexer for the tiered matches of q in (model,
// group) and fills res. An empty q matches nothing without a call, as the
// reference's client.
func (r *RemoteIndex) MatchPrefix(model, group string, q []uint64, res *core.MatchResult) error {
	res.Reset()
	if len(q) == 0 {
		return nil
	}
	buf := r.bufs.Get().(*remoteBuf)
	defer r.bufs.Put(buf)
	b := append(buf.body[:0], `{"block_hashes":[`...)
	for i, h := range q {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendInt(b, int64(h))
	}
	b = append(b, `],"model_name":`...)
	b = appendString(b, model)
	b = append(b, `,"routing_group":`...)
	b = appendString(b, group)
	b = append(b, '}')
	buf.body = b

	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(r.uri)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetBodyRaw(b)
	if err := r.hc.DoDeadline(req, resp, time.Now().Add(r.timeout)); err != nil {
		if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrNoFreeConns) {
			r.deadline.Add(1)
		} else {
			r.refused.Add(1)
		}
		return err
	}
	if sc := resp.StatusCode(); sc/100 != 2 {
		r.status.Add(1)
		return fmt.Errorf("%w %d", errRemoteStatus, sc)
	}
	buf.s.Reset(resp.Body())
	if err := decodeTiered(&buf.s, res); err != nil {
		res.Reset()
		r.decode.Add(1)
		return bodyErr(err)
	}
	r.ok.Add(1)
	return nil
}

// RemoteIndexStats counts the calls by outcome.
type RemoteIndexStats struct {
	OK, Refused, Deadline, Status, Decode uint64
}

// Stats returns the counters.
func (r *RemoteIndex) Stats() RemoteIndexStats {
	return RemoteIndexStats{OK: r.ok.Load(), Refused: r.refused.Load(), Deadline: r.deadline.Load(), Status: r.status.Load(), Decode: r.decode.Load()}
}

var (
	tieredTopFields    = jsonscan.NewFieldSet("block_size", "tiered")
	tieredFields       = jsonscan.NewFieldSet("device", "lower_tier")
	tieredDeviceFields = jsonscan.NewFieldSet("scores", "frequencies")
	tieredHitsFields   = jsonscan.NewFieldSet("hits")
	workerKeyFields    = jsonscan.NewFieldSet("worker_id", "dp_rank")
)

// decodeTiered reads a TieredQueryResponse (appendTiered's shape) into res:
// device blocks, then each lower tier's extension blocks per rank.
func decodeTiered(s *jsonscan.Scanner, res *core.MatchResult) error {
	var seen uint64
	err := s.Object("struct TieredQueryResponse", func(key []byte) error {
		if done, err := s.SkipUnknown(s.Field(tieredTopFields, &seen, "", key)); done {
			return err
		}
		if string(key) == "block_size" {
			_, err := s.Uint("block_size", 1<<32-1, "u32")
			return err
		}
		var seen2 uint64
		return s.Object("struct WireTieredMatchDetails", func(key []byte) error {
			if done, err := s.SkipUnknown(s.Field(tieredFields, &seen2, "tiered", key)); done {
				return err
			}
			if string(key) == "device" {
				return decodeDevice(s, res)
			}
			_, err := s.Array("lower_tier", "a sequence", func() error { return decodeTierEntry(s, res) })
			return err
		})
	})
	if err != nil {
		return err
	}
	return s.End()
}

func decodeDevice(s *jsonscan.Scanner, res *core.MatchResult) error {
	var seen uint64
	return s.Object("struct WireOverlapScores", func(key []byte) error {
		if done, err := s.SkipUnknown(s.Field(tieredDeviceFields, &seen, "device", key)); done {
			return err
		}
		if string(key) == "frequencies" {
			return s.Skip()
		}
		_, err := s.Array("scores", "a sequence", func() error {
			w, n, err := decodeRankCount(s, "scores")
			if err == nil {
				m := findMatch(res, w)
				m.Device = uint32(min(n, 1<<32-1))
			}
			return err
		})
		return err
	})
}

// decodeTierEntry reads one ["tier", {"hits": [[worker, n], ...]}].
func decodeTierEntry(s *jsonscan.Scanner, res *core.MatchResult) error {
	i := 0
	tier := -1
	_, err := s.Array("lower_tier", "a tuple", func() error {
		defer func() { i++ }()
		switch i {
		case 0:
			name, err := reqStr(s, "lower_tier")
			if err != nil {
				return err
			}
			for t := 1; t < core.NumTiers; t++ {
				if core.TierName(t) == name {
					tier = t
				}
			}
			if tier < 0 {
				return s.TypeErr("lower_tier", "unknown variant `"+jsonscan.Echo([]byte(name))+"`")
			}
			return nil
		case 1:
			var seen uint64
			return s.Object("struct WireLowerTierMatchDetails", func(key []byte) error {
				if done, err := s.SkipUnknown(s.Field(tieredHitsFields, &seen, "lower_tier", key)); done {
					return err
				}
				_, err := s.Array("hits", "a sequence", func() error {
					w, n, err := decodeRankCount(s, "hits")
					if err == nil {
						m := findMatch(res, w)
						v := uint32(min(n, 1<<32-1))
						switch tier {
						case 1:
							m.Host = v
						case 2:
							m.Disk = v
						default:
							m.External = v
						}
					}
					return err
				})
				return err
			})
		}
		return s.TypeErr("lower_tier", "trailing elements in a tuple")
	})
	return err
}

// decodeRankCount reads [{"worker_id": u64, "dp_rank": u32}, n].
func decodeRankCount(s *jsonscan.Scanner, field string) (core.WorkerKey, uint64, error) {
	var w core.WorkerKey
	var n uint64
	i := 0
	_, err := s.Array(field, "a tuple", func() error {
		defer func() { i++ }()
		switch i {
		case 0:
			var seen uint64
			return s.Object("struct WorkerWithDpRank", func(key []byte) error {
				if done, err := s.SkipUnknown(s.Field(workerKeyFields, &seen, field, key)); done {
					return err
				}
				if string(key) == "worker_id" {
					v, err := s.Uint("worker_id", 1<<64-1, "u64")
					w.WorkerID = v
					return err
				}
				v, err := s.Uint("dp_rank", 1<<32-1, "u32")
				w.DPRank = uint32(v)
				return err
			})
		case 1:
			var err error
			n, err = s.Uint(field, 1<<64-1, "u64")
			return err
		}
		return s.TypeErr(field, "trailing elements in a tuple")
	})
	return w, n, err
}

// findMatch returns res's match of w, appending it when absent.
func findMatch(res *core.MatchResult, w core.WorkerKey) *core.Match {
	for i := range res.Matches {
		if res.Matches[i].Worker == w {
			return &res.Matches[i]
		}
	}
	res.Matches = append(res.Matches, core.Match{Worker: w})
	return &res.Matches[len(res.Matches)-1]
}

var _ core.PrimaryIndex = (*RemoteIndex)(nil)
