package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/outbox-relay/outbox-relay/internal/config/sinkblock"
)

// sinkTypes are the sink types a configuration may name: kafka, whose
// settings sit on Sink itself, then every registered type with a block.
func sinkTypes() []string {
	names := []string{"kafka"}
	for _, t := range sinkblock.Types() {
		names = append(names, t.Name)
	}
	return names
}

// Block returns the settings block of the sink's own type, nil when it is
// not set (or the type is kafka, whose settings sit on Sink itself).
func (s *Sink) Block() sinkblock.Settings { return s.Blocks[s.Type] }

// UnmarshalYAML decodes a sink's own fields and the block of each
// registered type under the type's key. It decodes through a struct made at
// run time, Sink's fields plus one per registered type, so that the
// decoder's strictness (an unknown key is an error) and its line numbers
// hold inside the blocks as everywhere else.
func (s *Sink) UnmarshalYAML(unmarshal func(any) error) error {
	own := reflect.TypeFor[Sink]()
	var fields []reflect.StructField
	for i := range own.NumField() {
		if f := own.Field(i); f.Name != "Blocks" {
			fields = append(fields, reflect.StructField{Name: f.Name, Type: f.Type, Tag: f.Tag})
		}
	}
	ownFields := len(fields)
	types := sinkblock.Types()
	for i, t := range types {
		fields = append(fields, reflect.StructField{
			Name: fmt.Sprintf("Block%d", i),
			Type: reflect.TypeOf(t.New()),
			Tag:  reflect.StructTag(fmt.Sprintf("yaml:%q", t.Name)),
		})
	}
	v := reflect.New(reflect.StructOf(fields)).Elem()
	err := unmarshal(v.Addr().Interface())

	*s = Sink{}
	dst := reflect.ValueOf(s).Elem()
	for i := range ownFields {
		dst.FieldByName(fields[i].Name).Set(v.Field(i))
	}
	for i, t := range types {
		if b := v.Field(ownFields + i); !b.IsNil() {
			if s.Blocks == nil {
				s.Blocks = Blocks{}
			}
			s.Blocks[t.Name] = b.Interface().(sinkblock.Settings)
		}
	}
	return nameSink(err, v.Type())
}

// nameSink rewrites the decoder's messages to name the type made at run time
// as Sink, as they would had it decoded Sink itself.
func nameSink(err error, made reflect.Type) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = strings.ReplaceAll(m, made.String(), reflect.TypeFor[Sink]().String())
	}
	return &yaml.TypeError{Errors: msgs}
}

// kafkaFields lists the Kafka-only fields that are set.
func (s *Sink) kafkaFields() []string {
	var out []string
	add := func(set bool, name string) {
		if set {
			out = append(out, name)
		}
	}
	add(len(s.Brokers) > 0, "brokers")
	add(s.ClientID != "", "client_id")
	add(s.AutoCreateTopics, "auto_create_topics")
	add(s.DeliveryTimeout != 0, "delivery_timeout")
	add(s.RecordRetries != 0, "record_retries")
	add(s.Linger != 0, "linger")
	add(s.Compression != "", "compression")
	add(s.Partitioner != "", "partitioner")
	add(s.SASL != nil, "sasl")
	add(s.TLS != nil, "tls")
	add(s.ProgressTopic != "", "progress_topic")
	add(s.TransactionTimeout != 0, "transaction_timeout")
	add(s.MaxMessageBytes != 0, "max_message_bytes")
	return out
}

// validateSinkBlocks checks that a sink sets its own type's block and no
// other, and the block's settings.
func (c *Config) validateSinkBlocks(ps *problems, p string, s *Sink) {
	for _, t := range sinkblock.Types() {
		if s.Blocks[t.Name] != nil && t.Name != s.Type {
			ps.add(p+"."+t.Name, "set, but the sink's type is %q", s.Type)
		}
	}
	if _, ok := sinkblock.Lookup(s.Type); !ok {
		return // kafka, or a type that is not known
	}
	for _, f := range s.kafkaFields() {
		ps.add(p+"."+f, "a Kafka setting; settings of a %s sink go under %s.%s", s.Type, p, s.Type)
	}
	b := s.Block()
	if b == nil {
		ps.add(p+"."+s.Type, "required for a sink of type %s", s.Type)
		return
	}
	for _, pr := range b.Problems() {
		ps.add(fmt.Sprintf("%s.%s.%s", p, s.Type, pr.Field), "%s", pr.Msg)
	}
}

// ownTimeout is the sink's own bound on the wait for one message's
// confirmation; zero when it has none.
func (s *Sink) ownTimeout() time.Duration {
	if s.Type == "kafka" {
		return s.DeliveryTimeout.D()
	}
	if b := s.Block(); b != nil {
		return b.OwnTimeout()
	}
	return 0
}
