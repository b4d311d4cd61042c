package quote

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoQuoteVerb: production code quotes a value for an operator through
// Value, never with a %q verb, so that every message clips a huge value
// the same way. It reads the string literals (not the comments) of every
// non-test Go file of the plugin, the binaries, bpf and internal (but the
// test support under internal/testing).
func TestNoQuoteVerb(t *testing.T) {
	const root = "../.."
	var offenders []string
	for _, dir := range []string{"plugins", "cmd", "bpf", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" || path == filepath.Join(root, "internal", "testing") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(file, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err == nil && hasQuoteVerb(s) {
					pos := fset.Position(lit.Pos())
					rel, _ := filepath.Rel(root, pos.Filename)
					offenders = append(offenders, fmt.Sprintf("%s:%d", filepath.ToSlash(rel), pos.Line))
				}
				return true
			})
			return nil
		})
		require.NoError(t, err)
	}
	require.Empty(t, offenders, "a %q verb quotes a value for an operator; write %s and quote.Value(v) (quote.Rune for a character, quote.List for a []string)")
}

// hasQuoteVerb reports whether a format string holds a %q verb, with any
// flags, width, precision or argument index.
func hasQuoteVerb(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			continue
		}
		i++
		for i < len(s) && strings.IndexByte("+-# 0123456789.*[]", s[i]) >= 0 {
			i++
		}
		if i < len(s) && s[i] == 'q' {
			return true
		}
	}
	return false
}

// TestHasQuoteVerb: the scan finds the verb in its forms and not in %%q.
func TestHasQuoteVerb(t *testing.T) {
	for s, want := range map[string]bool{
		"%q": true, "interface %q: %w": true, "%-10q": true, "%#q": true, "%[2]q": true, "%+.3q": true,
		"%%q": false, "%s quoted": false, "100%% quiet": false, "%v": false, `mode = "generic"`: false, "%": false,
	} {
		require.Equal(t, want, hasQuoteVerb(s), s)
	}
}
