package layout

// Queue is a resolved mode queue: the hot table's own columns, and the
// archive's configuration.
type Queue struct {
	Participant, Sequence, Due Column
	Archive                    QueueSpec
}

// mergeQueue overlays a source's queue fields on its preset's.
func mergeQueue(q *QueueSpec, over QueueSpec, set func(name string, dst *string, v string)) {
	for _, f := range []struct {
		name string
		dst  *string
		v    string
	}{
		{"state.queue.attempts", &q.Attempts, over.Attempts},
		{"state.queue.participant", &q.Participant, over.Participant},
		{"state.queue.sequence", &q.Sequence, over.Sequence},
		{"state.queue.due", &q.Due, over.Due},
		{"state.queue.attempt_no", &q.AttemptNo, over.AttemptNo},
		{"state.queue.status", &q.Status, over.Status},
		{"state.queue.states.dispatching", &q.States.Dispatching, over.States.Dispatching},
		{"state.queue.states.dispatched", &q.States.Dispatched, over.States.Dispatched},
		{"state.queue.states.retryable", &q.States.Retryable, over.States.Retryable},
		{"state.queue.states.failed", &q.States.Failed, over.States.Failed},
		{"state.queue.states.zombie", &q.States.Zombie, over.States.Zombie},
		{"state.queue.claimed_at", &q.ClaimedAt, over.ClaimedAt},
		{"state.queue.completed_at", &q.CompletedAt, over.CompletedAt},
		{"state.queue.rail_reference", &q.RailReference, over.RailReference},
		{"state.queue.rail_code", &q.RailCode, over.RailCode},
		{"state.queue.error_code", &q.ErrorCode, over.ErrorCode},
		{"state.queue.error_message", &q.ErrorMessage, over.ErrorMessage},
		{"state.queue.latency_ms", &q.LatencyMS, over.LatencyMS},
		{"state.queue.channel", &q.Channel, over.Channel},
	} {
		set(f.name, f.dst, f.v)
	}
}

// resolveQueue checks mode queue's settings against the hot table: its
// participant, sequence and due columns must exist; the archive's table,
// attempt number, status and every state must be named.
func resolveQueue(q QueueSpec, need func(field, col string) (Column, error)) (*Queue, error) {
	out := &Queue{Archive: q}
	var err error
	if out.Participant, err = need("state.queue.participant", q.Participant); err != nil {
		return nil, err
	}
	if out.Sequence, err = need("state.queue.sequence", q.Sequence); err != nil {
		return nil, err
	}
	if out.Due, err = need("state.queue.due", q.Due); err != nil {
		return nil, err
	}
	for _, f := range [][2]string{
		{"state.queue.attempts", q.Attempts}, {"state.queue.attempt_no", q.AttemptNo}, {"state.queue.status", q.Status},
		{"state.queue.claimed_at", q.ClaimedAt},
		{"state.queue.states.dispatching", q.States.Dispatching}, {"state.queue.states.dispatched", q.States.Dispatched},
		{"state.queue.states.retryable", q.States.Retryable}, {"state.queue.states.failed", q.States.Failed},
		{"state.queue.states.zombie", q.States.Zombie},
	} {
		if f[1] == "" {
			return nil, &FieldError{f[0], "required for mode queue"}
		}
	}
	return out, nil
}
