-- ResumeTopic: ? topic, ? topic again (its bytes: the collation pads
-- trailing spaces). A topic that is not paused is a no-op.
DELETE FROM {pause_topic} WHERE topic = ? AND CAST(topic AS BINARY) = CAST(? AS BINARY)
