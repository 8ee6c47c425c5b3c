package layout

import (
	"fmt"
)

// AddExtra asks the store to render template t for every claimed row, as
// text, into source.Row.Extra at the returned index (NULL when a column it
// needs is NULL). Routes use it for the columns their conditions compare and
// for their own topic templates. field names the setting, for errors; every
// column t references must be in cols.
func (l *Layout) AddExtra(field string, t Template, cols []Column) (int, error) {
	for _, name := range t.Columns() {
		found := false
		for _, c := range cols {
			if c.Name == name {
				found = true
				break
			}
		}
		if !found {
			return 0, &FieldError{field, fmt.Sprintf("column %q not found", name)}
		}
	}
	l.Extra = append(l.Extra, t)
	return len(l.Extra) - 1, nil
}
