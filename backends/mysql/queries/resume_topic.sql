-- ResumeTopic: ? topic (VARBINARY: compared by its bytes, "orders " is
-- not "orders"). A topic that is not paused is a no-op.
DELETE FROM {pause_topic} WHERE topic = CAST(? AS BINARY)
