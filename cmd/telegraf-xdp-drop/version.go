package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

// version and commit are set at build time (make build: -ldflags "-X main.version=... -X main.commit=...").
var version, commit = "", ""

// printVersion writes the version, the commit it was built from and the Go
// and cilium/ebpf versions it was built with, as read from the build info.
func printVersion(w io.Writer) {
	v, rev, goVersion, ebpfVersion := binaryVersion(), commit, "unknown", "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		goVersion = info.GoVersion
		if rev == "" {
			rev = vcsCommit(info)
		}
		for _, dep := range info.Deps {
			if dep.Path == "github.com/cilium/ebpf" {
				ebpfVersion = dep.Version
				if dep.Replace != nil {
					ebpfVersion = dep.Replace.Version + " (replaced)"
				}
			}
		}
	}
	if rev == "" {
		rev = "unknown"
	}
	fmt.Fprintf(w, "telegraf-xdp-drop %s\ncommit %s\ngo %s\ncilium/ebpf %s\n", v, rev, goVersion, ebpfVersion)
}

// binaryVersion is the version set at build time, else the module's from
// the build info, else "(devel)".
func binaryVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}

// vcsCommit returns the commit the binary was built from, with "-dirty" when
// the tree had uncommitted changes, or "unknown" outside a VCS checkout.
func vcsCommit(info *debug.BuildInfo) string {
	commit, dirty := "unknown", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && commit != "" {
		commit += "-dirty"
	}
	return commit
}
