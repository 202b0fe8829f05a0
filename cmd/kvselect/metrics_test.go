package main

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/kvselect/kvselect/zmqin"
)

// distinctStats returns a zmqin.Stats whose every number (each field and
// each element of Events) is distinct: 1001, 1002, ... in field order.
func distinctStats(t *testing.T) (zmqin.Stats, []uint64) {
	t.Helper()
	var st zmqin.Stats
	var vals []uint64
	next := func() uint64 { vals = append(vals, uint64(1001+len(vals))); return vals[len(vals)-1] }
	v := reflect.ValueOf(&st).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(next()))
		case reflect.Uint64:
			f.SetUint(next())
		case reflect.Array:
			for j := range f.Len() {
				f.Index(j).SetUint(next())
			}
		default:
			t.Fatalf("zmqin.Stats.%s: kind %v has no metric rule here", v.Type().Field(i).Name, f.Kind())
		}
	}
	return st, vals
}

// TestIngressMetricsExportEveryStat: every number of zmqin.Stats appears
// in the scrape (a field added to Stats without a metric fails here), each
// series once, and the limit and connection fields under their names.
func TestIngressMetricsExportEveryStat(t *testing.T) {
	st, vals := distinctStats(t)
	var b bytes.Buffer
	writeIngressMetrics(&b, st)
	series := map[string]string{}
	byValue := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("line %q", line)
		}
		if _, dup := series[name]; dup {
			t.Errorf("series %s written twice", name)
		}
		series[name] = val
		byValue[val] = name
	}
	for _, v := range vals {
		if _, ok := byValue[strconv.FormatUint(v, 10)]; !ok {
			t.Errorf("stat value %d is not exported:\n%s", v, b.String())
		}
	}
	for name, want := range map[string]int64{
		"kvselect_kv_listeners_running":                                     int64(st.Ranks),
		"kvselect_kv_listeners_connected":                                   int64(st.Connected),
		`kvselect_kv_connections_dropped_total{reason="too_many_frames"}`:   int64(st.TooManyFrames),
		`kvselect_kv_connections_dropped_total{reason="message_too_large"}`: int64(st.MessageTooLarge),
		`kvselect_kv_connections_dropped_total{reason="frame_too_large"}`:   int64(st.FrameTooLarge),
		"kvselect_kv_queue_bytes":                                           st.QueueBytes,
		"kvselect_kv_queue_bytes_limit_per_listener":                        st.QueueBytesLimit,
		"kvselect_kv_queue_bytes_limit":                                     st.QueueBytesLimitTotal,
		"kvselect_kv_writer_queue_bytes":                                    st.WriterQueueBytes,
		"kvselect_kv_writer_queue_bytes_limit_per_writer":                   st.WriterQueueBytesLimit,
		"kvselect_kv_queue_depth":                                           int64(st.QueueDepth),
		"kvselect_kv_queue_limit_per_listener":                              int64(st.QueueLimit),
		`kvselect_kv_messages_dropped_total{reason="queue_overflow"}`:       int64(st.Overflow),
		`kvselect_kv_wire_events_dropped_total{reason="malformed"}`:         int64(st.Events[zmqin.DropMalformed]),
	} {
		if got := series[name]; got != strconv.FormatInt(want, 10) {
			t.Errorf("%s = %q, want %d", name, got, want)
		}
	}
}
