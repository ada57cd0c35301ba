// Tag trees: a tag named with '/' separators (gfx/webgl/textures) is a
// path, and every level of the paths gets a total (docs/tag-trees.md).
// The books stay flat, one entry per tag; the levels are worked out here,
// when a report is shown, so every figure of a level is an exact sum of
// the tags' own.

package reporter

import (
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/tagalloc/tagalloc/internal/layout"
)

// OwnLevel names the child that holds a tag's own figures when the tag is
// also a level above others (a tag "gfx" beside "gfx/webgl"): about:memory
// refuses a node that has an amount of its own and children, so the own
// amount goes in a child of its own, as about:memory's diff adds a
// "(fake child)" for the same case. The parentheses keep it apart from a
// real tag's component in practice; a real component named "(own)" under
// the same level makes the own child "(own 2)".
const OwnLevel = "(own)"

// MaxTagLen is the longest tag name, in bytes (the books' limit), so a
// path has at most MaxTagDepth levels (one-byte components).
const (
	MaxTagLen   = layout.MaxTagName
	MaxTagDepth = (MaxTagLen + 1) / 2
)

// TagPath splits a tag name into the components of its path. ok is false
// for a name that is not a path: an empty name, an empty component
// ("a//b", a leading or trailing '/'), or a component "." or "..". Such a
// name (which tagging refuses, but an old report may hold) is one flat
// level of its own, named as it is; a name without '/' is a path of one
// component.
func TagPath(name string) (components []string, ok bool) {
	if name == "" {
		return nil, false
	}
	components = strings.Split(name, "/")
	for _, c := range components {
		if c == "" || c == "." || c == ".." {
			return nil, false
		}
	}
	return components, true
}

// TagLevel is one level of a tag tree.
type TagLevel struct {
	// Name is the level's name under its parent: a path's component,
	// components merged ("webgl/textures", where a level has one child
	// and no tag of its own, as about:memory merges them), a flat name
	// (TagPath), or OwnLevel.
	Name string
	// Path is the level's full path: the name of the tags it holds for a
	// leaf (an own child's is its parent's), the prefix for a level above
	// tags ("gfx/webgl").
	Path string
	// Tags are the indexes of the tags named Path, for a leaf: one, unless
	// the report names a tag twice. Nil for a level above tags.
	Tags []int
	// Children: a leaf has none; a level above tags has at least one (two
	// in a merged tree).
	Children []*TagLevel

	first int // the lowest tag index at or under the level: the order of siblings
}

// Leaf reports whether the level is one or more tags (no children).
func (l *TagLevel) Leaf() bool { return len(l.Children) == 0 }

// Tag is the index of the one tag the level is, if it is exactly one tag:
// only such a level has a peak (a level's peak is not the sum of its
// tags' peaks, which may have come at different times, and the books
// keep peaks per tag).
func (l *TagLevel) Tag() (int, bool) {
	if len(l.Children) == 0 && len(l.Tags) == 1 {
		return l.Tags[0], true
	}
	return 0, false
}

// Each calls fn with the index of every tag at and under the level.
func (l *TagLevel) Each(fn func(i int)) {
	for _, i := range l.Tags {
		fn(i)
	}
	for _, c := range l.Children {
		c.Each(fn)
	}
}

// Walk calls fn on the level and every level under it, parents first,
// with the depth (0 for the level itself).
func (l *TagLevel) Walk(fn func(l *TagLevel, depth int)) { l.walk(fn, 0) }

func (l *TagLevel) walk(fn func(*TagLevel, int), depth int) {
	fn(l, depth)
	for _, c := range l.Children {
		c.walk(fn, depth+1)
	}
}

// TagTree nests tag names by path: the top levels, each with its
// children, siblings in the order their first tag appears in names.
// Levels with one child and no tag of their own are merged into it, as
// about:memory shows them ("webgl/textures").
func TagTree(names []string) []*TagLevel {
	return buildTagTree(names, nil, true)
}

// buildTagTree is TagTree over the names whose index skip does not take,
// merged or not (about:memory's export writes every level and leaves the
// merging to about:memory).
func buildTagTree(names []string, skip func(i int) bool, merge bool) []*TagLevel {
	root := &TagLevel{}
	kids := map[*TagLevel]map[string]*TagLevel{}
	for i, name := range names {
		if skip != nil && skip(i) {
			continue
		}
		comps, ok := TagPath(name)
		if !ok {
			comps = []string{name}
		}
		at := root
		for k, c := range comps {
			m := kids[at]
			if m == nil {
				m = map[string]*TagLevel{}
				kids[at] = m
			}
			next := m[c]
			if next == nil {
				path := name
				if ok {
					path = strings.Join(comps[:k+1], "/")
				}
				next = &TagLevel{Name: c, Path: path, first: i}
				m[c] = next
				at.Children = append(at.Children, next)
			}
			at = next
		}
		at.Tags = append(at.Tags, i)
	}
	root.Walk(func(l *TagLevel, _ int) {
		if len(l.Tags) == 0 || len(l.Children) == 0 || l == root {
			return
		}
		// a tag that is also a level above others: its own figures go in
		// a child, ordered among its siblings by where the tag appeared
		own := OwnLevel
		for n := 2; kids[l][own] != nil; n++ {
			own = "(own " + strconv.Itoa(n) + ")"
		}
		child := &TagLevel{Name: own, Path: l.Path, Tags: l.Tags, first: l.Tags[0]}
		l.Tags = nil
		l.Children = append(l.Children, child)
		sort.SliceStable(l.Children, func(a, b int) bool { return l.Children[a].first < l.Children[b].first })
	})
	if merge {
		for _, l := range root.Children {
			mergeChains(l)
		}
	}
	return root.Children
}

// mergeChains merges, under l and l itself, every level that has one
// child and no tag of its own into that child.
func mergeChains(l *TagLevel) {
	for len(l.Tags) == 0 && len(l.Children) == 1 {
		c := l.Children[0]
		l.Name += "/" + c.Name
		l.Path, l.Tags, l.Children = c.Path, c.Tags, c.Children
	}
	for _, c := range l.Children {
		mergeChains(c)
	}
}

// TagTotals are a level's figures: exact sums over the tags at and under
// it (saturating at the largest uint64, which no real books reach).
type TagTotals struct {
	LiveBytes   uint64
	LiveBlocks  uint64
	AllocBytes  uint64
	AllocBlocks uint64
	// LiveRequestedBytes: nil unless every tag under the level has it.
	LiveRequestedBytes *uint64
	// ReportedBytes: what memory reporters measured of the tags' blocks.
	ReportedBytes uint64
	Tags          int // how many tags the sums are over
}

// addSat64 is a + b, saturating.
func addSat64(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// Totals sums the level's tags (tags is what the tree was built from).
func (l *TagLevel) Totals(tags []Tag) TagTotals {
	var t TagTotals
	var req uint64
	reqKnown := true
	l.Each(func(i int) {
		g := &tags[i]
		t.Tags++
		t.LiveBytes = addSat64(t.LiveBytes, g.LiveBytes)
		t.LiveBlocks = addSat64(t.LiveBlocks, g.LiveBlocks)
		t.AllocBytes = addSat64(t.AllocBytes, g.AllocBytes)
		t.AllocBlocks = addSat64(t.AllocBlocks, g.AllocBlocks)
		t.ReportedBytes = addSat64(t.ReportedBytes, g.ReportedBytes)
		if g.LiveRequestedBytes == nil {
			reqKnown = false
		} else {
			req = addSat64(req, *g.LiveRequestedBytes)
		}
	})
	if reqKnown && t.Tags > 0 {
		t.LiveRequestedBytes = &req
	}
	return t
}

// tagNames are the names of tags, in order.
func tagNames(tags []Tag) []string {
	names := make([]string, len(tags))
	for i, t := range tags {
		names[i] = t.Name
	}
	return names
}
