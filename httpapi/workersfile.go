package httpapi

import (
	"errors"
	"strconv"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi/internal/jsonscan"
)

// A workers file is kvselect's own discovery source (Dynamo names "a
// workers file" only as an example of one, in ai-dynamo/dynamo:
// lib/kv-router/src/services/selection/membership.rs): one JSON object,
// {"workers": [WorkerRequest, ...]}, the complete desired membership. Its
// entries are decoded by the same code as a POST /workers body, so a record
// the route accepts is accepted in the file with the same defaults, and one
// it rejects is rejected with the same text.

var workersFileFields = jsonscan.NewFieldSet("workers")

// DecodeWorkersFile reads a workers file. Unknown keys are ignored, at the
// top and in entries; "workers" is required and must be an array (it may
// be empty: no workers); an entry without worker_id, or two entries with
// the same worker_id, make the whole file invalid. An error names the
// entry and its line and column.
func DecodeWorkersFile(b []byte) ([]core.WorkerSpec, error) {
	s := jsonscan.New(b)
	var seen uint64
	var specs []core.WorkerSpec
	has := false
	err := s.Object("struct WorkersFile", func(key []byte) error {
		if done, err := s.SkipUnknown(s.Field(workersFileFields, &seen, "", key)); done {
			return err
		}
		specs = []core.WorkerSpec{}
		set, err := s.Array("workers", "a sequence", func() error {
			at := "workers[" + strconv.Itoa(len(specs)) + "]"
			spec, hasID, err := decodeWorkerObject(s, at+".")
			if err == nil && !hasID {
				err = s.TypeErr(at, "missing field `worker_id`")
			}
			specs = append(specs, spec)
			return err
		})
		if err == nil && !set {
			err = s.TypeErr("workers", "invalid type: null, expected a sequence")
		}
		has = true
		return err
	})
	if err == nil {
		objEnd := s.Offset()
		if err = s.End(); err == nil && !has {
			err = jsonscan.MissingField(b, objEnd, "workers")
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

// fileError turns a scanner error into a file's: "invalid JSON: " before a
// syntax error, a data error as it is (serde's text, without the HTTP
// extractor's prefixes of a body's).
func fileError(err error) error {
	var se *jsonscan.Error
	if !errors.As(err, &se) {
		return err
	}
	if se.Class == jsonscan.Syntax {
		return errors.New("invalid JSON: " + se.Msg)
	}
	return errors.New(se.Msg)
}
