package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Options configure a Client. The zero value is usable.
type Options struct {
	// HTTPClient, when set, is used as is (its Transport's pooling
	// included); otherwise New builds one from the fields below.
	HTTPClient *http.Client
	// Token, when set, is sent as Authorization: Bearer <token> (a
	// selector started with --auth-token-file).
	Token string
	// MaxConnsPerHost bounds the connections to the selector, idle ones
	// kept for reuse included; 0 means 64.
	MaxConnsPerHost int
	// Timeout bounds each call (as http.Client.Timeout); 0 means 10 s.
	// A context deadline applies as well.
	Timeout time.Duration
	// MaxResponseBytes bounds a response body; 0 means 64 MiB.
	MaxResponseBytes int64
}

// Client calls one selector. Safe for concurrent use.
type Client struct {
	base    string
	hc      *http.Client
	token   string
	maxBody int64
}

// New returns a client of the selector at baseURL ("http://host:8092").
func New(baseURL string, o Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: %q is not an http(s) base URL", baseURL)
	}
	c := &Client{base: strings.TrimSuffix(baseURL, "/"), hc: o.HTTPClient, token: o.Token, maxBody: o.MaxResponseBytes}
	if c.maxBody <= 0 {
		c.maxBody = 64 << 20
	}
	if c.hc == nil {
		conns := o.MaxConnsPerHost
		if conns <= 0 {
			conns = 64
		}
		timeout := o.Timeout
		if timeout <= 0 {
			timeout = 10 * time.Second
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost, tr.MaxIdleConns = conns, conns, conns
		c.hc = &http.Client{Transport: tr, Timeout: timeout}
	}
	return c, nil
}

// Close closes the idle pooled connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Error is an answer of the selector other than 2xx: its status and the
// body's {"error": message} (details when the server sent them).
type Error struct {
	StatusCode int
	Message    string
	Details    map[string]any
	raw        string // the body, for answers that carry more (a 503 /ready)
}

func (e *Error) Error() string {
	return fmt.Sprintf("kvselect: %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// Error classes, for errors.Is: each matches the statuses the server
// answers for that class.
var (
	ErrBadRequest   = errors.New("bad request")    // 400, 405, 413, 415, 422
	ErrUnauthorized = errors.New("unauthorized")   // 401
	ErrNotFound     = errors.New("not found")      // 404
	ErrConflict     = errors.New("conflict")       // 409
	ErrOverloaded   = errors.New("overloaded")     // 429
	ErrNotReady     = errors.New("not ready")      // 503
	ErrInternal     = errors.New("internal error") // 500 and any other
)

// Is reports whether e is of class target.
func (e *Error) Is(target error) bool { return classOf(e.StatusCode) == target }

func classOf(status int) error {
	switch status {
	case 400, 405, 413, 415, 422:
		return ErrBadRequest
	case 401:
		return ErrUnauthorized
	case 404:
		return ErrNotFound
	case 409:
		return ErrConflict
	case 429:
		return ErrOverloaded
	case 503:
		return ErrNotReady
	}
	return ErrInternal
}

// do sends a call: in, when non-nil, as its JSON body; a 2xx answer is
// decoded into out (when non-nil); anything else is an *Error. It
// returns the status.
func (c *Client) do(ctx context.Context, method, path string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("client: %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return 0, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, c.maxBody+1))
	if err == nil && int64(len(raw)) > c.maxBody {
		err = fmt.Errorf("response body over %d bytes", c.maxBody)
	}
	// Drain what is left so the connection returns to the pool.
	_, _ = io.Copy(io.Discard, res.Body)
	if err != nil {
		return res.StatusCode, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		e := &Error{StatusCode: res.StatusCode, raw: string(raw)}
		var body struct {
			Error   string         `json:"error"`
			Details map[string]any `json:"details"`
		}
		if json.Unmarshal(raw, &body) == nil && body.Error != "" {
			e.Message, e.Details = body.Error, body.Details
		} else {
			e.Message = strings.TrimSpace(string(raw))
		}
		return res.StatusCode, e
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return res.StatusCode, fmt.Errorf("client: %s %s: decoding the answer: %w", method, path, err)
		}
	}
	return res.StatusCode, nil
}

// idPath returns prefix + the escaped id + suffix.
func idPath(prefix, id, suffix string) string { return prefix + url.PathEscape(id) + suffix }

// filter returns "?model_name=..&routing_group=.." with the non-empty ones.
func filter(model, group string) string {
	q := url.Values{}
	if model != "" {
		q.Set("model_name", model)
	}
	if group != "" {
		q.Set("routing_group", group)
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }
