// Package buildinfo says what this binary is: its version, the commit it was
// built from, when, and with which Go. The build sets the first three with
//
//	-ldflags "-X github.com/outbox-relay/outbox-relay/internal/buildinfo.version=v1.2.3 ..."
//
// (see the Makefile's build target); a plain `go build` falls back to what
// the Go toolchain recorded, or "dev".
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

var (
	version = ""
	commit  = ""
	date    = ""
)

// Info describes the running binary.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	BuildDate string `json:"build_date"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// Get returns the binary's build information.
func Get() Info {
	i := Info{Version: version, Commit: commit, BuildDate: date, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && i.Commit == "":
				i.Commit = s.Value
			case s.Key == "vcs.time" && i.BuildDate == "":
				i.BuildDate = s.Value
			}
		}
	}
	if i.Version == "" {
		i.Version = "dev"
	}
	if i.Commit == "" {
		i.Commit = "unknown"
	}
	if i.BuildDate == "" {
		i.BuildDate = "unknown"
	}
	return i
}

// String is the one-line form `outbox-relay --version` prints.
func (i Info) String() string {
	return fmt.Sprintf("outbox-relay %s (commit %s, built %s, %s, %s)", i.Version, i.Commit, i.BuildDate, i.GoVersion, i.Platform)
}
