package config

// The configurations under test name every sink type.
import _ "github.com/outbox-relay/outbox-relay/internal/sink/all"
