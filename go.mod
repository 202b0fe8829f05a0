module github.com/kvselect/kvselect

go 1.26.0

require (
	github.com/puzpuzpuz/xsync/v3 v3.5.1
	github.com/zeebo/xxh3 v1.1.0
)

require (
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
