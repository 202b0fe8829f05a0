package main

import (
	"runtime"
	"runtime/debug"
)

// version is kvselect's version, set at link time with
// -ldflags "-X main.version=v1.2.3"; empty, the module version or the VCS
// revision recorded in the build info is used (buildInfoOf).
var version string

// buildInfo is what `kvselect --version` prints and kvselect_build_info
// exports.
type buildInfo struct {
	version, goVersion string
}

// readBuildInfo returns this binary's build info.
func readBuildInfo() buildInfo {
	bi, _ := debug.ReadBuildInfo()
	return buildInfoOf(version, bi)
}

// buildInfoOf resolves the version: the link-time one, else the main
// module's version (a `go install ...@v1.2.3` build), else the VCS revision
// (12 hex digits, "+dirty" with local changes), else "devel".
func buildInfoOf(linked string, bi *debug.BuildInfo) buildInfo {
	b := buildInfo{version: linked, goVersion: runtime.Version()}
	if bi == nil {
		if b.version == "" {
			b.version = "devel"
		}
		return b
	}
	if bi.GoVersion != "" {
		b.goVersion = bi.GoVersion
	}
	if b.version != "" {
		return b
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		b.version = v
		return b
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	switch {
	case rev == "":
		b.version = "devel"
	case dirty:
		b.version = rev[:min(12, len(rev))] + "+dirty"
	default:
		b.version = rev[:min(12, len(rev))]
	}
	return b
}
