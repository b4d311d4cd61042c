package xdp_drop

import (
	"fmt"
	"path/filepath"

	"github.com/xdp-drop/xdp_drop/bpf"
	"github.com/xdp-drop/xdp_drop/internal/quote"
)

// Bounds on the number of prefix files: of one option of a rule, and of
// all the rules of an instance. With the prefixes every file together may
// list (listedPrefixes), they bound what reading the lists holds.
const (
	MaxPrefixFilesPerOption = 64
	MaxPrefixFiles          = 256
)

// Keys of the prefix file options of a rule, as errors name them.
const (
	keySrcPrefixFile = "src_prefix_file"
	keyDstPrefixFile = "dst_prefix_file"
)

// checkPrefixFilePaths checks the paths of a prefix file option.
func checkPrefixFilePaths(key string, paths []string) error {
	if len(paths) > MaxPrefixFilesPerOption {
		return fmt.Errorf("%s lists %d files; an option lists at most %d: merge the lists into fewer files", key, len(paths), MaxPrefixFilesPerOption)
	}
	seen := make(map[string]bool, len(paths))
	for _, p := range paths {
		switch {
		case p == "":
			return fmt.Errorf(`%s has an empty path; list files such as "/etc/telegraf-xdp-drop/lists/drop.txt"`, key)
		case len(p) > maxPath:
			return fmt.Errorf("%s: %s is %d bytes long; a path has at most %d", key, quote.Value(p), len(p), maxPath)
		case hasControl(p):
			return fmt.Errorf("%s: %s holds a NUL or control character; list the files' paths", key, quote.Value(p))
		case !filepath.IsAbs(p):
			return fmt.Errorf(`%s: %s is not an absolute path; write it from /, such as "/etc/telegraf-xdp-drop/lists/drop.txt"`, key, quote.Value(p))
		case seen[filepath.Clean(p)]:
			return fmt.Errorf("%s: %s is listed twice; list each file once", key, quote.Value(p))
		}
		seen[filepath.Clean(p)] = true
	}
	return nil
}

// parseRuleFiles checks a rule's prefix file options and names the files
// in the rule (bpf.Rule.PrefixFiles); Init reads them.
func parseRuleFiles(r *Rule, out *bpf.Rule) error {
	if err := checkPrefixFilePaths(keySrcPrefixFile, r.SrcPrefixFile); err != nil {
		return err
	}
	if err := checkPrefixFilePaths(keyDstPrefixFile, r.DstPrefixFile); err != nil {
		return err
	}
	for _, p := range r.SrcPrefixFile {
		out.PrefixFiles = append(out.PrefixFiles, keySrcPrefixFile+" "+p)
	}
	for _, p := range r.DstPrefixFile {
		out.PrefixFiles = append(out.PrefixFiles, keyDstPrefixFile+" "+p)
	}
	return nil
}
