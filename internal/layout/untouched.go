package layout

// ModeNone is the state of a layout whose table the relay never writes: a
// history table read by capture cursor, where what became of each row is
// kept in the relay's own tables. A configuration does not name it as
// state.mode; MergeUntouched gives it.
const ModeNone = "none"

// MergeUntouched is Merge for a source whose table the relay never writes
// (capture cursor): the layout's state, whether the source or its preset
// sets one, is dropped, and so are the columns the relay would write
// (retry_count, error). max_retries, which the relay only reads, stays.
func MergeUntouched(preset string, over Spec, topic string) (Spec, map[string]bool, error) {
	over.State = State{Mode: ModeNone}
	l, explicit, err := Merge(preset, over, topic)
	if err != nil {
		return l, explicit, err
	}
	l.State = State{Mode: ModeNone}
	l.RetryCount, l.Error = "", ""
	return l, explicit, nil
}
