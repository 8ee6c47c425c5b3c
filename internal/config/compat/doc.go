// Package compat lets a deployment of inviqa/kafka-outbox-relay switch to
// outbox-relay by changing its image alone: `outbox-relay run` accepts that
// relay's command-line flags (hidden) and reads its environment variables
// through [config.FromInviqa]; package inviqa does what they ask of the
// process beyond relaying (its jobs, the sidecar hand-off, the idle mode).
//
// The settings are used instead of a configuration file when --inviqa-env is
// given, when one of that relay's flags is, or when --config is not given and
// DB_DRIVER and DB_HOST are set. docs/inviqa-migration.md maps every setting.
package compat
