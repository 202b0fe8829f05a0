package perf

import "strings"

// runtimeHelp returns the help text of a family that
// metrics.WriteProcessMetrics writes (VictoriaMetrics/metrics:
// go_metrics.go and process_metrics_linux.go, which give none): the text
// of the known ones, a generic one naming the source for the rest, and ""
// for a family that is neither go_ nor process_ (an undescribed
// kvselect family keeps an empty HELP, which the exposition tests
// reject).
func runtimeHelp(name string) string {
	if h, ok := runtimeHelps[name]; ok {
		return h
	}
	switch {
	case strings.HasPrefix(name, "go_memstats_"):
		return "Go runtime.MemStats field " + strings.TrimPrefix(name, "go_memstats_") + "."
	case strings.HasPrefix(name, "go_"):
		return "Go runtime statistic (runtime/metrics), as VictoriaMetrics/metrics exports it."
	case strings.HasPrefix(name, "process_"):
		return "Process statistic from /proc, as VictoriaMetrics/metrics exports it."
	}
	return ""
}

var runtimeHelps = map[string]string{
	"go_goroutines":                       "Goroutines that currently exist.",
	"go_threads":                          "OS threads created by the Go runtime.",
	"go_gomaxprocs":                       "GOMAXPROCS: the CPUs executing Go code at once.",
	"go_cpu_count":                        "Logical CPUs usable by the process.",
	"go_info":                             "Go version the binary was built with (value 1).",
	"go_info_ext":                         "Go compiler, GOOS, GOARCH and GOROOT of the build (value 1).",
	"go_gc_duration_seconds":              "Stop-the-world pause durations of garbage collections.",
	"go_gc_forced_count":                  "Garbage collections forced by the application (runtime.GC).",
	"go_gc_pauses_seconds":                "Distribution of individual garbage-collection pause latencies.",
	"go_gc_cpu_seconds_total":             "CPU time spent on garbage collection.",
	"go_gc_mark_assist_cpu_seconds_total": "CPU time goroutines spent assisting the garbage collector.",
	"go_sched_latencies_seconds":          "Time goroutines spent runnable before running.",
	"go_mutex_wait_seconds_total":         "Time goroutines spent blocked on sync.Mutex or sync.RWMutex.",
	"go_scavenge_cpu_seconds_total":       "CPU time spent returning memory to the OS.",
	"go_memlimit_bytes":                   "The Go memory limit (GOMEMLIMIT).",
	"go_cgo_calls_count":                  "Calls made from Go into C.",
	"process_cpu_seconds_total":           "User and system CPU time of the process.",
	"process_cpu_seconds_user_total":      "User CPU time of the process.",
	"process_cpu_seconds_system_total":    "System CPU time of the process.",
	"process_resident_memory_bytes":       "Resident memory (RSS) of the process.",
	"process_virtual_memory_bytes":        "Virtual memory size of the process.",
	"process_start_time_seconds":          "Start time of the process since the Unix epoch.",
	"process_num_threads":                 "OS threads of the process.",
	"process_open_fds":                    "Open file descriptors of the process.",
	"process_max_fds":                     "Limit on the process's open file descriptors.",
}
