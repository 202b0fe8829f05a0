package client

import (
	"context"
	"encoding/json"
	"net/http"
)

// Select picks a worker for req without booking it (POST /select). With a
// SelectionID the selection is cached on this selector for Reserve.
func (c *Client) Select(ctx context.Context, req *SelectRequest) (*Selection, error) {
	var out Selection
	if _, err := c.do(ctx, http.MethodPost, "/select", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SelectAndReserve picks a worker and books it atomically on this selector
// (POST /select_and_reserve); a SelectionID already booked is ErrConflict.
func (c *Client) SelectAndReserve(ctx context.Context, req *SelectRequest) (*Selection, error) {
	var out Selection
	if _, err := c.do(ctx, http.MethodPost, "/select_and_reserve", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Reserve books a reservation (POST /reservations): the cached selection of
// an earlier Select (WorkerID nil; ErrNotFound when it expired, was used,
// or was made on another replica), or the explicit form (WorkerID set).
func (c *Client) Reserve(ctx context.Context, req *ReservationRequest) (*Reservation, error) {
	var out Reservation
	if _, err := c.do(ctx, http.MethodPost, "/reservations", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PrefillComplete reports that the reservation's prefill finished.
func (c *Client) PrefillComplete(ctx context.Context, selectionID string) error {
	_, err := c.do(ctx, http.MethodPost, idPath("/reservations/", selectionID, "/prefill_complete"), nil, nil)
	return err
}

// OutputBlock reports one more decoded block of the reservation (local to
// this selector); decayFraction, when non-nil, is in [0, 1].
func (c *Client) OutputBlock(ctx context.Context, selectionID string, decayFraction *float64) error {
	body := struct {
		DecayFraction *float64 `json:"decay_fraction,omitempty"`
	}{decayFraction}
	_, err := c.do(ctx, http.MethodPost, idPath("/reservations/", selectionID, "/output_block"), body, nil)
	return err
}

// Free ends the reservation (DELETE /reservations/{id}).
func (c *Client) Free(ctx context.Context, selectionID string) error {
	_, err := c.do(ctx, http.MethodDelete, idPath("/reservations/", selectionID, ""), nil, nil)
	return err
}

// UpsertWorker registers or replaces a worker (POST /workers). A worker
// that cannot be scheduled is still recorded: check Lifecycle and
// NotSchedulableReasons.
func (c *Client) UpsertWorker(ctx context.Context, w *Worker) (*WorkerRecord, error) {
	var out WorkerRecord
	if _, err := c.do(ctx, http.MethodPost, "/workers", w, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PatchWorker changes the set fields of worker id (PATCH /workers/{id}).
func (c *Client) PatchWorker(ctx context.Context, id uint64, p *WorkerPatch) (*WorkerRecord, error) {
	var out WorkerRecord
	if _, err := c.do(ctx, http.MethodPatch, "/workers/"+u64(id), p, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteWorker removes worker id and returns its final record.
func (c *Client) DeleteWorker(ctx context.Context, id uint64) (*WorkerRecord, error) {
	var out WorkerRecord
	if _, err := c.do(ctx, http.MethodDelete, "/workers/"+u64(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Workers lists the catalog, filtered by model and routing group when
// non-empty.
func (c *Client) Workers(ctx context.Context, model, group string) ([]WorkerRecord, error) {
	var out []WorkerRecord
	if _, err := c.do(ctx, http.MethodGet, "/workers"+filter(model, group), nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Health checks liveness (GET /health).
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/health", nil, nil)
	return err
}

// Ready returns the readiness: Ready is false (and the error nil) when no
// worker is schedulable, as the server's 503 says.
func (c *Client) Ready(ctx context.Context) (*Readiness, error) {
	var out Readiness
	_, err := c.do(ctx, http.MethodGet, "/ready", nil, &out)
	if e, ok := err.(*Error); ok && e.StatusCode == http.StatusServiceUnavailable {
		// The 503 carries the same body.
		if json.Unmarshal([]byte(e.raw), &out) == nil {
			return &out, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// Loads returns the active load of every partition (filtered when the
// names are non-empty).
func (c *Client) Loads(ctx context.Context, model, group string) ([]PartitionLoads, error) {
	var out []PartitionLoads
	if _, err := c.do(ctx, http.MethodGet, "/loads"+filter(model, group), nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// PotentialLoads returns the load each worker rank would have with the
// prompt.
func (c *Client) PotentialLoads(ctx context.Context, req *QueryRequest) ([]PotentialLoad, error) {
	var out []PotentialLoad
	if _, err := c.do(ctx, http.MethodPost, "/potential_loads", req, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// OverlapScores returns the prompt's tiered overlap on every schedulable
// worker rank.
func (c *Client) OverlapScores(ctx context.Context, req *QueryRequest) (*OverlapScores, error) {
	var out OverlapScores
	if _, err := c.do(ctx, http.MethodPost, "/overlap_scores", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Dump returns the KV index in the standalone indexer's recovery format
// (GET /dump), undecoded: it can be large.
func (c *Client) Dump(ctx context.Context) (json.RawMessage, error) {
	var out json.RawMessage
	if _, err := c.do(ctx, http.MethodGet, "/dump", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}
