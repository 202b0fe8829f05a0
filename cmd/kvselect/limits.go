package main

// defaultMaxConnections is the --max-connections default for a process
// whose soft RLIMIT_NOFILE is nofile:
//
//	(nofile − 128) × 3/4, at least 16, at most 1 Mi
//
// so that idle HTTP clients cannot take the descriptors everything else
// needs. The 128 cover the runtime, the listeners, logs and the files
// pprof and key loading open; the quarter grows with the limit for the ZMQ
// sockets (a SUB per worker rank, a DEALER per replay, the replica mesh).
// 1024 gives 672 connections, 65536 gives 49056. A limit that cannot be
// read (0) gives the figure for 1024.
func defaultMaxConnections(nofile uint64) int {
	if nofile == 0 {
		nofile = 1024
	}
	if nofile < 128+22 {
		return 16
	}
	return int(min((nofile-128)*3/4, 1<<20))
}
