-- Events per hour and arm over the last day of the range. The CAST form of
-- the 1-day bound comes before `event_time < $3` on purpose: DataFusion types
-- a placeholder from its comparison with a column, and the last occurrence
-- it sees wins, so that one must be the plain comparison.
SELECT date_trunc('hour', event_time) AS event_hour,
       arm,
       count(*) AS events
FROM abtest
WHERE experiment_id = $1
  AND event_time >= CAST($3 AS TIMESTAMP) - INTERVAL '1 day'
  AND event_time >= $2
  AND event_time < $3
GROUP BY date_trunc('hour', event_time), arm
ORDER BY event_hour, arm
