package telemetry

import "runtime/debug"

// Version is the build's version, as the Go toolchain stamped it: the main
// module's version (a release tag, or a pseudo-version from the VCS
// checkout the binary was built in, "+dirty" when it had changes), else
// the VCS revision, else "(devel)" (built with -buildvcs=false, or outside
// a checkout). Every span's resource carries it as service.version.
func Version() string {
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
