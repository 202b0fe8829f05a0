package httpapi

import (
	"errors"
	"strconv"
	"strings"

	"github.com/kvselect/kvselect/core"
)

// A workers file is kvselect's own discovery source (Dynamo names "a
// workers file" only as an example of one, in ai-dynamo/dynamo:
// lib/kv-router/src/services/selection/membership.rs): one JSON object,
// {"workers": [WorkerRequest, ...]}, the complete desired membership. Its
// entries are decoded by the same code as a POST /workers body, so a record
// the route accepts is accepted in the file with the same defaults, and one
// it rejects is rejected with the same text.

var workersFileFields = newFieldSet("workers")

// DecodeWorkersFile reads a workers file. Unknown keys are ignored, at the
// top and in entries; "workers" is required and must be an array (it may
// be empty: no workers); an entry without worker_id, or two entries with
// the same worker_id, make the whole file invalid. An error names the
// entry and its line and column.
func DecodeWorkersFile(b []byte) ([]core.WorkerSpec, error) {
	s := &scanner{b: b}
	var seen uint64
	var specs []core.WorkerSpec
	has := false
	err := s.object("struct WorkersFile", func(key []byte) error {
		if done, err := s.skipUnknown(s.field(workersFileFields, &seen, "", key)); done {
			return err
		}
		specs = []core.WorkerSpec{}
		set, err := s.array("workers", "a sequence", func() error {
			at := "workers[" + strconv.Itoa(len(specs)) + "]"
			spec, hasID, err := decodeWorkerObject(s, at+".")
			if err == nil && !hasID {
				err = s.typeErr(at, "missing field `worker_id`")
			}
			specs = append(specs, spec)
			return err
		})
		if err == nil && !set {
			err = s.typeErr("workers", "invalid type: null, expected a sequence")
		}
		has = true
		return err
	})
	if err == nil {
		objEnd := s.i
		if err = s.end(); err == nil && !has {
			err = missingField(b, objEnd, "workers")
		}
	}
	if err != nil {
		return nil, fileError(err)
	}
	ids := make(map[uint64]struct{}, len(specs))
	for _, sp := range specs {
		if _, dup := ids[sp.WorkerID]; dup {
			return nil, errors.New("duplicate worker_id " + strconv.FormatUint(sp.WorkerID, 10))
		}
		ids[sp.WorkerID] = struct{}{}
	}
	return specs, nil
}

// fileError turns a body error into a file's: the HTTP extractor's prefixes
// give way to "invalid JSON: " for a syntax error and nothing for a data
// error.
func fileError(err error) error {
	var de *decodeError
	if !errors.As(err, &de) {
		return err
	}
	if m, ok := strings.CutPrefix(de.msg, syntaxPrefix); ok {
		return errors.New("invalid JSON: " + m)
	}
	return errors.New(strings.TrimPrefix(de.msg, dataPrefix))
}
