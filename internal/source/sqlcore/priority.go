package sqlcore

import (
	"strconv"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/source"
)

// ClassRank is the rank of the row at alias among p's classes (see
// source.Priority): 0 when its column matches the first class, 1 the
// second, and len(p.Classes) when it matches none (or is NULL).
func (s SQL) ClassRank(alias string, p *source.Priority) string {
	text := s.D.Text(s.Col(alias, p.Column))
	var b strings.Builder
	b.WriteString("CASE")
	for i, c := range p.Classes {
		b.WriteString(" WHEN " + s.D.Like(text, s.D.Literal(LikePattern(c))) + " THEN " + strconv.Itoa(i))
	}
	b.WriteString(" ELSE " + strconv.Itoa(len(p.Classes)) + " END")
	return b.String()
}

// LikeEscape is the escape character of the patterns LikePattern writes.
const LikeEscape = "!"

// LikePattern turns a class pattern into a LIKE pattern escaped by
// LikeEscape: '*' matches any run of characters, every other character
// itself ('%' and '_' included).
func LikePattern(class string) string {
	var b strings.Builder
	for _, r := range class {
		switch r {
		case '*':
			b.WriteByte('%')
		case '%', '_', '!':
			b.WriteString(LikeEscape)
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// EffectiveRank is the rank a claim under a priority takes a row of its
// window by, with ordering: the best (lowest) rank among the rows of its
// key from it on, in the claim's order (order: the window's columns that
// give it, ascending), so that a row is taken no later than any later row
// of its key; a row without a key (k = ”) keeps its own. rank and key are
// columns of the window. Sorting the window by this rank and then by the
// claim's order puts every row of a key after the earlier ones: any first
// part of that sort leaves no row of a key behind a later one.
func EffectiveRank(rank, key string, order []string) string {
	desc := make([]string, len(order))
	for i, o := range order {
		desc[i] = o + " DESC"
	}
	return "CASE WHEN " + key + " = '' THEN " + rank + " ELSE MIN(" + rank + ") OVER (PARTITION BY " + key +
		" ORDER BY " + strings.Join(desc, ", ") + " ROWS UNBOUNDED PRECEDING) END"
}
