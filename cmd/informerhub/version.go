package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/informerhub/informerhub/server/metrics"
)

// version and revision say which informerhub this is, set at build time
// (the Makefile and the Dockerfile do):
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.revision=$(git rev-parse HEAD)" ./cmd/informerhub
var version, revision = "dev", ""

// buildInfo says which informerhub this is: the release, and the VCS
// revision given at build time, else the one the Go toolchain stamped (with
// "-dirty" for uncommitted changes) when it built a checkout.
func buildInfo() metrics.BuildInfo {
	info := metrics.BuildInfo{Version: version, Revision: revision}
	if bi, ok := debug.ReadBuildInfo(); ok && info.Revision == "" {
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && info.Revision != "" {
			info.Revision += "-dirty"
		}
	}
	return info
}

func versionString() string {
	info := buildInfo()
	revision := info.Revision
	if revision == "" {
		revision = "unknown"
	}
	return fmt.Sprintf("informerhub %s (revision %s, %s %s/%s)", info.Version, revision, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
