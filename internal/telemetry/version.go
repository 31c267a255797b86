package telemetry

import "runtime/debug"

// stamped is a version the build names, which wins: go build -ldflags
// "-X github.com/actloop/actloop/internal/telemetry.stamped=v1.2.3" (the
// Dockerfile's VERSION build argument; an image is built without .git).
var stamped string

// Version is the build's version: the one stamped, else the one the Go
// toolchain stamped: the main module's version (a release tag, or a
// pseudo-version from the VCS checkout the binary was built in, "+dirty"
// when it had changes), else the VCS revision, else "(devel)" (built with
// -buildvcs=false, or outside a checkout). Every span's resource carries
// it as service.version, and `actloop --version` prints it.
func Version() string {
	if stamped != "" {
		return stamped
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "(devel)"
	}
	if modified == "true" {
		rev += "+dirty"
	}
	return rev
}
