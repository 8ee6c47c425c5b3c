package redis

import (
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/sink"
)

// errorCode is the code a Redis error reply starts with (WRONGTYPE, OOM,
// ERR...), "" for an error that is not a reply. The code is the protocol's
// classification of the error, not free text.
func errorCode(err error) string {
	var re goredis.Error
	if !errors.As(err, &re) {
		return ""
	}
	msg := re.Error()
	for i := 0; i < len(msg); i++ {
		if msg[i] == ' ' {
			return msg[:i]
		}
	}
	return msg
}

// terminal reports whether no retry can store the message: the stream key
// holds another type.
func terminal(err error) bool {
	return errorCode(err) == "WRONGTYPE"
}

// serverDown lists the error replies of a server that takes no write at all
// right now, whatever the message: loading its data set, a replica that
// lost its primary or is read-only, out of memory, or refusing the relay's
// credentials.
var serverDown = map[string]bool{"LOADING": true, "MASTERDOWN": true, "READONLY": true, "OOM": true,
	"NOAUTH": true, "WRONGPASS": true}

// down reports whether err is the server's failure rather than the
// message's: no connection could be made, or a reply of serverDown.
func down(err error) bool {
	return sink.IsConnectError(err) || errors.Is(err, goredis.ErrPoolTimeout) || serverDown[errorCode(err)]
}

// result turns an XADD error into Publish's answer for a message.
func result(stream string, err error) error {
	if err == nil {
		return nil
	}
	err = fmt.Errorf("xadd to stream %q: %w", stream, err)
	switch {
	case terminal(err):
		return sink.Terminal(err)
	case down(err):
		return sink.Down(err)
	}
	return err
}
