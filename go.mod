module github.com/kvselect/kvselect

go 1.26

require (
	github.com/go-zeromq/zmq4 v0.17.0
	github.com/puzpuzpuz/xsync/v3 v3.5.1
	github.com/zeebo/xxh3 v1.1.0
)

require (
	github.com/go-zeromq/goczmq/v4 v4.2.2 // indirect
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	golang.org/x/sync v0.7.0 // indirect
	golang.org/x/sys v0.30.0 // indirect
	golang.org/x/text v0.15.0 // indirect
)
