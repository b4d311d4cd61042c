// Package docs_test holds the repository's documentation to the code: the
// architecture names every file, the READMEs stay short, and every relative
// link of the documents resolves, to a file and to a heading.
package docs_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// root is the repository, seen from this package's directory.
const root = ".."

// maxReadmeLines bounds each README: what, install, config, metrics, example
// output and links; the depth goes to docs/ by topic.
const maxReadmeLines = 450

// goFiles lists the repository's Go files that are not tests, relative to
// the root. Hidden directories (.git, .ci) and testdata hold none of ours.
func goFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

// TestArchitectureNamesEveryGoFile: docs/ARCHITECTURE.md names every Go
// file of the repository that is not a test, generated ones included, by
// its path in backquotes, and every source file it names exists.
func TestArchitectureNamesEveryGoFile(t *testing.T) {
	doc, err := os.ReadFile("ARCHITECTURE.md")
	require.NoError(t, err)
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([A-Za-z0-9_./-]+\\.(?:go|c|h))`").FindAllStringSubmatch(string(doc), -1) {
		named[m[1]] = true
	}
	for f := range named {
		if !strings.Contains(f, "/") {
			continue // a file named within its directory's line, e.g. `xdp_drop.c`
		}
		_, err := os.Stat(filepath.Join(root, f))
		require.NoError(t, err, "docs/ARCHITECTURE.md names %s, which does not exist", f)
	}
	var missing []string
	for _, f := range goFiles(t) {
		if !named[f] {
			missing = append(missing, f)
		}
	}
	require.Empty(t, missing, "docs/ARCHITECTURE.md must name every non-test Go file with one line (`path` | what it holds)")
}

// TestArchitectureNamesEachFileOnce: no file has two rows in
// docs/ARCHITECTURE.md's tables: a second row would say another thing of it.
func TestArchitectureNamesEachFileOnce(t *testing.T) {
	doc, err := os.ReadFile("ARCHITECTURE.md")
	require.NoError(t, err)
	rows := map[string]int{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Za-z0-9_./-]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		rows[m[1]]++
	}
	require.NotEmpty(t, rows)
	var twice []string
	for f, n := range rows {
		if n > 1 {
			twice = append(twice, f)
		}
	}
	require.Empty(t, twice, "docs/ARCHITECTURE.md has more than one row for these files")
}

// trafficBinaries may import the test-support packages: they exist to make
// and send traffic, as the tests do.
var trafficBinaries = []string{"internal/testing/", "cmd/xdp-drop-demo/", "bench/", "test/"}

// TestTestSupportStaysOutOfProduction: as docs/ARCHITECTURE.md says, no
// production file outside the traffic binaries imports internal/testing.
func TestTestSupportStaysOutOfProduction(t *testing.T) {
	var offenders []string
	for _, f := range goFiles(t) {
		if hasAnyPrefix(f, trafficBinaries) {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, f), nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range file.Imports {
			if strings.Contains(imp.Path.Value, "/internal/testing/") {
				offenders = append(offenders, f+" imports "+imp.Path.Value)
			}
		}
	}
	require.Empty(t, offenders, "production code must not import the test-support packages under internal/testing/")
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// TestReadmeLength: the top README and the plugin's stay in the shape of a
// Telegraf plugin README.
func TestReadmeLength(t *testing.T) {
	for _, f := range []string{"README.md", "plugins/inputs/xdp_drop/README.md"} {
		text, err := os.ReadFile(filepath.Join(root, f))
		require.NoError(t, err)
		lines := strings.Count(string(text), "\n")
		require.LessOrEqual(t, lines, maxReadmeLines, "%s has %d lines; move the depth to docs/ by topic", f, lines)
	}
}

// documents are the Markdown files a reader follows links between.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("*.md")
	require.NoError(t, err)
	files := []string{"README.md", "BENCHMARKS.md", "plugins/inputs/xdp_drop/README.md", "examples/influxdb/queries.md"}
	for _, d := range docs {
		files = append(files, "docs/"+d)
	}
	return files
}

// TestDocLinks: every relative link of the documents resolves to a file of
// the repository and, with a #fragment into a Markdown file, to one of its
// headings, so that no link is left pointing where a section used to be.
func TestDocLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s:]*)\)`)
	for _, doc := range documents(t) {
		text, err := os.ReadFile(filepath.Join(root, doc))
		require.NoError(t, err)
		for _, m := range link.FindAllStringSubmatch(withoutCode(string(text)), -1) {
			target, frag, _ := strings.Cut(m[1], "#")
			path := doc
			if target != "" {
				path = filepath.ToSlash(filepath.Join(filepath.Dir(doc), target))
			}
			_, err := os.Stat(filepath.Join(root, path))
			require.NoError(t, err, "%s links to %s", doc, m[1])
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			linked, err := os.ReadFile(filepath.Join(root, path))
			require.NoError(t, err)
			require.Contains(t, anchors(string(linked)), frag, "%s links to %s: %s has no such heading", doc, m[1], path)
		}
	}
}

// withoutCode drops fenced code blocks, where ](…) is not a link.
func withoutCode(text string) string {
	var b strings.Builder
	fenced := false
	for _, line := range strings.SplitAfter(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(line)
		}
	}
	return b.String()
}

// anchors returns the fragments GitHub gives the headings of a Markdown
// text: lower case, punctuation but - and _ dropped, spaces as -.
func anchors(text string) []string {
	var out []string
	for _, line := range strings.Split(withoutCode(text), "\n") {
		heading := strings.TrimLeft(line, "#")
		if heading == line || !strings.HasPrefix(heading, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}
