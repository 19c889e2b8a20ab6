-- ResumeTopic: $1 topic.
DELETE FROM {pause_topic} WHERE topic = $1
