package source

// RawFields are a claimed row's text and byte columns as a driver returned
// them; the slices may be reused by the driver once Fill returns. A nil
// field is SQL NULL.
type RawFields struct {
	ID, Payload, Topic, Key, PartitionKey, OrderKey, Headers []byte
	EventType, AggregateType, AggregateID                    []byte
}

// Fill copies f into r with two allocations whatever the row's width: every
// byte field lands in one slice and every text field in one string. This is
// the relay's per-row hot path. An empty topic is no topic, an empty
// partition key none; a NULL payload is an empty one.
func (r *Row) Fill(f RawFields) {
	buf := make([]byte, 0, len(f.Payload)+len(f.Key)+len(f.PartitionKey)+len(f.Headers))
	take := func(v []byte) []byte {
		if v == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, v...)
		return buf[start:len(buf):len(buf)]
	}
	r.Payload = take(f.Payload)
	if r.Payload == nil {
		r.Payload = []byte{}
	}
	r.Key = take(f.Key)
	if pk := take(f.PartitionKey); len(pk) > 0 {
		r.PartitionKey = pk
	}
	r.Headers = take(f.Headers)

	strs := [...][]byte{f.ID, f.Topic, f.OrderKey, f.EventType, f.AggregateType, f.AggregateID}
	n := 0
	for _, s := range strs {
		n += len(s)
	}
	sb := make([]byte, 0, n)
	for _, s := range strs {
		sb = append(sb, s...)
	}
	all := string(sb)
	off := 0
	str := func(i int) string {
		s := all[off : off+len(strs[i])]
		off += len(strs[i])
		return s
	}
	r.ID = str(0)
	if topic := str(1); topic != "" {
		r.Topic, r.TopicOK = topic, true
	}
	r.OrderKey = str(2)
	r.EventType, r.AggregateType, r.AggregateID = str(3), str(4), str(5)
}
