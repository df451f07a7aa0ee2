// Package buildinfo says which build of receiptflow a binary is: the
// module version and the VCS revision Go recorded in it
// (runtime/debug.ReadBuildInfo). Every binary's --version prints String.
package buildinfo

import (
	"cmp"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// String returns one line naming the binary name, its main module's
// version ("(devel)" for a build from a work tree), the VCS revision,
// its time and whether the tree was modified, when Go recorded them, and
// the Go version: "validator (devel) revision 6e684c1… 2026-12-05T14:00:00Z
// modified, go1.26.8". Safe for concurrent use.
func String(name string) string {
	return stamped(name, revision)
}

// revision is the VCS revision make build sets (-ldflags -X), for builds
// Go does not stamp: a workspace (go.work) build records no vcs.* setting.
var revision string

func stamped(name, rev string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Sprintf("%s (no build information) revision %s, %s", name, cmp.Or(rev, "unknown"), runtime.Version())
	}
	return format(name, bi, rev)
}

func format(name string, bi *debug.BuildInfo, fallback string) string {
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	parts := []string{name, version}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		parts = append(parts, "revision "+rev)
		if t := settings["vcs.time"]; t != "" {
			parts = append(parts, t)
		}
		if settings["vcs.modified"] == "true" {
			parts = append(parts, "modified")
		}
	} else if fallback != "" {
		parts = append(parts, "revision "+fallback)
	} else {
		parts = append(parts, "revision unknown")
	}
	goVersion := bi.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	return strings.Join(parts, " ") + ", " + goVersion
}

// Flag registers --version on fs: when set, the binary prints String and
// exits 0 instead of running.
func Flag(fs *flag.FlagSet) *bool {
	return fs.Bool("version", false, "print the version (module version, VCS revision) and exit")
}
