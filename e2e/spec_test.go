package e2e

// The spec lives in the repository (issue 12, item 7): every citation in the
// code, the schemas and the docs points at a heading of docs/spec.md, and
// nothing cites the old out-of-tree spec any more, so a reader of the
// repository alone can follow each one.

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const (
	// specPath is the spec, relative to the repository root.
	specPath = "docs/spec.md"
	// oldSpecName is how the out-of-tree spec was cited, spelled here in
	// pieces so that this file does not cite it itself.
	oldSpecName = "SP" + "EC"
)

var (
	// oldSpecCitation is any mention of the out-of-tree spec, which was
	// cited by its name in capitals.
	oldSpecCitation = regexp.MustCompile(`\b` + oldSpecName + `\b`)
	// specHeading is a numbered heading of the spec: "## 4. Replay
	// safety", or "### 4.2 Acks" for a subsection.
	specHeading = regexp.MustCompile(`^#{2,4} (\d+(?:\.\d+)*)\.? `)
	// specCitation is the spec's path followed by "§4" or "§4.2", or by
	// a list that marks each section: "§3, §4" or "§3 and §4".
	specCitation = regexp.MustCompile(`docs/spec\.md((?:[ ,]*(?:and\s+)?§\d+(?:\.\d+)*)+)`)
	specSection  = regexp.MustCompile(`\d+(?:\.\d+)*`)
)

// specSections reads the section numbers that docs/spec.md has headings for.
func specSections(t *testing.T, root string) map[string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join(root, specPath))
	if err != nil {
		t.Fatalf("the spec must be in the repository: %v", err)
	}
	defer f.Close()
	secs := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := specHeading.FindStringSubmatch(sc.Text()); m != nil {
			secs[m[1]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return secs
}

// specCheckFile returns one problem per bad line of the file at rel: a
// mention of the old spec, or a section of docs/spec.md with no heading.
func specCheckFile(text, rel string, secs map[string]bool) []string {
	var bad []string
	for i, line := range strings.Split(text, "\n") {
		if oldSpecCitation.MatchString(line) {
			bad = append(bad, fmt.Sprintf("%s:%d cites %s, not %s: %s", rel, i+1, oldSpecName, specPath, strings.TrimSpace(line)))
		}
		for _, m := range specCitation.FindAllStringSubmatch(line, -1) {
			for _, sec := range specSection.FindAllString(m[1], -1) {
				if !secs[sec] {
					bad = append(bad, fmt.Sprintf("%s:%d cites %s §%s, which has no heading there", rel, i+1, specPath, sec))
				}
			}
		}
	}
	return bad
}

// specCitedFile reports whether a file of the repository is one whose
// citations are checked: source, scripts, schemas and docs.
func specCitedFile(name string) bool {
	switch filepath.Ext(name) {
	case ".go", ".md", ".lua", ".json":
		return true
	}
	return false
}

func TestSpecCitationsResolve(t *testing.T) {
	root := deployRoot
	secs := specSections(t, root)
	for _, want := range []string{"1", "2", "3", "4", "5", "6", "7", "8"} {
		if !secs[want] {
			t.Errorf("%s has no heading for §%s", specPath, want)
		}
	}
	var bad []string
	cites := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !specCitedFile(d.Name()) {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := string(b)
		cites += len(specCitation.FindAllString(text, -1))
		bad = append(bad, specCheckFile(text, rel, secs)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
	// The walk must have found the citations at all: a walk from the wrong
	// directory would pass with nothing to check.
	if cites < 50 {
		t.Errorf("found only %d citations of %s; is the walk at the repository root?", cites, specPath)
	}
}

// TestSpecCheckCatchesBadCitations holds the checker itself to lines it must
// reject and lines it must accept.
func TestSpecCheckCatchesBadCitations(t *testing.T) {
	secs := map[string]bool{"2": true, "3": true, "4": true, "4.1": true}
	for _, tc := range []struct {
		line string
		bad  int
	}{
		{"// the reasons of {old} section 2", 1},
		{"// ({old} §4)", 1},
		{"see ../shared/{old}.md", 1},
		{"// {spec} §9", 1},
		{"// {spec} §4.2", 1},
		{"// {spec} §3, §9", 1},
		{"// {spec} §3 and §9", 1},
		{"// {spec} §2", 0},
		{"// {spec} §4.1, §3", 0},
		{"// ({spec} §3).", 0},
		{"// the spec's records, a {old}IAL case", 0},
	} {
		line := strings.NewReplacer("{old}", oldSpecName, "{spec}", specPath).Replace(tc.line)
		if got := len(specCheckFile(line, "x.go", secs)); got != tc.bad {
			t.Errorf("%q: %d problems, want %d", line, got, tc.bad)
		}
	}
}
