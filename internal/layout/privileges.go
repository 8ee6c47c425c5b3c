package layout

import "slices"

// NeededPrivileges lists what the layout needs on its outbox table: SELECT
// always; UPDATE to mark rows (or keep retry columns); DELETE only when the
// layout deletes delivered rows; a queue (mode queue) SELECT, INSERT and
// DELETE; a table the relay never writes (ModeNone) SELECT alone.
func (l *Layout) NeededPrivileges() []string {
	if l.Mode == ModeNone {
		return []string{"SELECT"}
	}
	if l.Mode == "queue" {
		// A claim deletes; a retry and a replay put the row back.
		return []string{"SELECT", "INSERT", "DELETE"}
	}
	need := []string{"SELECT"}
	if l.Mode != "delete" || l.RetryCount != "" || l.Error != "" {
		need = append(need, "UPDATE")
	}
	if l.Mode == "delete" {
		need = append(need, "DELETE")
	}
	return need
}

// UpdatedColumns lists the columns of the outbox table that the relay writes
// (marking rows published or dead, keeping retry columns, recording claims,
// and putting rows back on replay).
func (l *Layout) UpdatedColumns() []string {
	var cols []string
	for _, c := range []string{l.Flag, l.PublishedAt, l.Status, l.RetryCount, l.Error, l.Errored.Name, l.BatchID.Name, l.ClaimedAt.Name} {
		if c != "" && !slices.Contains(cols, c) {
			cols = append(cols, c)
		}
	}
	return cols
}
