-- ResumePartition: ? partition. One that is not paused is a no-op.
DELETE FROM {pause_part} WHERE `partition` = ?
