package readrecovery_test

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// policyRulePattern is the shape of a rule's name: lowercase words joined
// by hyphens ("stop-not-shorten").
var policyRulePattern = regexp.MustCompile(`^[a-z0-9]+(?:-[a-z0-9]+)+$`)

// markdownAnchors returns the GitHub anchors of a Markdown file's headings
// (outside fenced code), and separately the names of its rules: the
// headings of level 3 that have a rule's shape.
func markdownAnchors(src string) (anchors, rules map[string]bool) {
	anchors, rules = map[string]bool{}, map[string]bool{}
	fenced := false
	for _, line := range strings.Split(src, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		level := len(line) - len(strings.TrimLeft(line, "#"))
		title := strings.TrimSpace(line[level:])
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			case r > 127:
				b.WriteRune(r)
			}
		}
		anchors[b.String()] = true
		if level == 3 && policyRulePattern.MatchString(title) {
			rules[title] = true
		}
	}
	return anchors, rules
}

// repoFiles walks the repository (every module) and returns the paths of
// the files whose name ends with suffix, skipping hidden directories,
// testdata and node_modules.
func repoFiles(t *testing.T, suffix string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != "." || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, suffix) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPolicyNamesResolve holds the repository to docs/policy.md being the
// one home of every rule: every other page links to a rule by its name,
// so a renamed or removed rule must fail here rather than leave a dead
// reference. It checks that
//   - every relative Markdown link of every .md file points to a file that
//     exists and, with a #fragment, to a heading of that file;
//   - every rule a Go comment cites as "docs/policy.md: name[, name…]" or
//     (docs/policy.md, "name") is a rule of docs/policy.md;
//   - every rule of docs/policy.md has its row in the rule table.
func TestPolicyNamesResolve(t *testing.T) {
	policySrc, err := os.ReadFile("docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rules := markdownAnchors(string(policySrc))
	if len(rules) < 60 {
		t.Fatalf("docs/policy.md has %d rules; the heading pattern no longer finds them", len(rules))
	}

	link := regexp.MustCompile(`\]\(([^)\s]*)\)`)
	mdFiles := repoFiles(t, ".md")
	anchorsOf := map[string]map[string]bool{}
	for _, f := range mdFiles {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		anchorsOf[filepath.ToSlash(f)], _ = markdownAnchors(string(src))
	}
	links := 0
	for _, f := range mdFiles {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(src), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			resolved := filepath.ToSlash(f)
			if file != "" {
				resolved = path.Clean(path.Join(path.Dir(filepath.ToSlash(f)), file))
				if _, err := os.Stat(filepath.FromSlash(resolved)); err != nil {
					t.Errorf("%s links to %s, which does not exist", f, target)
					continue
				}
			}
			links++
			if frag == "" || !strings.HasSuffix(resolved, ".md") {
				continue
			}
			if !anchorsOf[resolved][frag] {
				t.Errorf("%s links to %s: %s has no heading #%s", f, target, resolved, frag)
			}
		}
	}
	if links < 50 {
		t.Fatalf("found %d relative links in the Markdown files; the pattern no longer finds them", links)
	}

	// A citation is "policy.md" followed by ":" or "," and then one or
	// more rule names separated by commas (a comment's line breaks and
	// "//" included).
	cite := regexp.MustCompile(`policy\.md[:,]`)
	name := regexp.MustCompile(`^"?([a-z0-9]+(?:-[a-z0-9]+)+)"?`)
	sep := regexp.MustCompile(`^,\s*(?://\s*)?`)
	cited := 0
	for _, f := range repoFiles(t, ".go") {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(src)
		for _, loc := range cite.FindAllStringIndex(text, -1) {
			rest := strings.TrimLeft(text[loc[1]:], " \t")
			rest = strings.TrimPrefix(rest, "\n")
			rest = strings.TrimLeft(strings.TrimPrefix(strings.TrimLeft(rest, " \t"), "//"), " \t")
			for {
				m := name.FindStringSubmatch(rest)
				if m == nil {
					break
				}
				cited++
				if !rules[m[1]] {
					t.Errorf("%s cites docs/policy.md rule %q, which docs/policy.md does not define", f, m[1])
				}
				rest = rest[len(m[0]):]
				s := sep.FindString(rest)
				if s == "" {
					break
				}
				rest = rest[len(s):]
			}
		}
	}
	if cited < 50 {
		t.Fatalf("found %d rule citations in Go files; the pattern no longer finds them", cited)
	}

	_, table, ok := strings.Cut(string(policySrc), "\n## Rule table\n")
	if !ok {
		t.Fatal("docs/policy.md has no rule table")
	}
	for r := range rules {
		if !strings.Contains(table, "\n| "+r+" |") {
			t.Errorf("rule %s has no row in docs/policy.md's rule table", r)
		}
	}
}
