-- HoldState: the hold row, if any.
SELECT reason, since FROM {hold}
