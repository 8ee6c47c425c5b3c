package sqlcore

// Dialect is what a database spells its own way.
type Dialect interface {
	// Quote quotes one identifier.
	Quote(ident string) string
	// Literal renders a string constant.
	Literal(s string) string
	// Text renders expr as text.
	Text(expr string) string
	// NullText is a NULL of a text type.
	NullText() string
	// Concat joins text expressions; NULL when any of them is.
	Concat(parts []string) string
	// Bool renders a boolean constant.
	Bool(b bool) string
	// Now is the time a statement records as a delivery time.
	Now() string
	// Timestamp renders a UTC time constant ("2006-01-02 15:04:05").
	Timestamp(utc string) string
	// ResetError is the SET item that clears a layout's error column when
	// a dead letter is put back in the pending set, or "" when the store
	// clears it itself (its value depends on the column's type).
	ResetError(quotedCol string) string
	// Like is the condition that text matches pattern (a LIKE pattern
	// escaped by LikeEscape), byte for byte whatever the collation.
	Like(text, pattern string) string
	// Hash32 is the first 32 bits of the MD5 of text's UTF-8 bytes, as an
	// unsigned integer (source.Hash32).
	Hash32(text string) string
}

// SQL builds expressions for one table alias in one dialect.
type SQL struct{ D Dialect }

// Col renders alias.column.
func (s SQL) Col(alias, name string) string { return alias + "." + s.D.Quote(name) }

// OptCol renders alias.column, or NULL when the layout has no such column.
func (s SQL) OptCol(alias, name string) string {
	if name == "" {
		return "NULL"
	}
	return s.Col(alias, name)
}

// NullIfEmpty makes an empty text NULL: an empty key is no key, empty
// headers are none. NULL stays NULL.
func NullIfEmpty(expr string) string {
	if expr == "" || expr == "NULL" {
		return expr
	}
	return "NULLIF(" + expr + ", '')"
}
