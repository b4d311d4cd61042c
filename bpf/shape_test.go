package bpf

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFileLines bounds a hand-written source file of the package: one
// concern per file (the ban table's API, its index, its maps).
const maxFileLines = 520

// TestFilesStaySmall: no hand-written, non-test Go file of bpf/ grows past
// maxFileLines; the bpf2go output is generated and exempt.
func TestFilesStaySmall(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var long []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || strings.HasSuffix(name, "_bpfel.go") {
			continue
		}
		text, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(text, []byte("\n")); n > maxFileLines {
			long = append(long, name)
		}
	}
	if len(long) > 0 {
		t.Fatalf("bpf files over %d lines: %v; split them by concern", maxFileLines, long)
	}
}
