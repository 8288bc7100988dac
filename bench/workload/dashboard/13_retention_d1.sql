-- Day-1 retention per arm. Cohort: every user active in [$2, $3), with d0 =
-- the user's first active day in that range. Retained: cohort users with an
-- event on day d0 + 1. The return day may fall after $3 (always, for d7 on a
-- 7-day range), so events are read up to $3 + 1 days, while the cohort only
-- uses days before $3. The last condition of user_days repeats the upper
-- bound with $3 compared to a column expression: DataFusion infers a
-- placeholder's type only from such comparisons, not through CAST.
WITH user_days AS (
  SELECT arm, user_id, date_trunc('day', event_time) AS d
  FROM abtest
  WHERE experiment_id = $1
    AND event_time >= $2
    AND event_time < CAST($3 AS TIMESTAMP) + INTERVAL '1 day'
    AND event_time - INTERVAL '1 day' < $3
  GROUP BY arm, user_id, date_trunc('day', event_time)
),
cohort AS (
  SELECT arm, user_id, min(d) AS d0
  FROM user_days
  WHERE d < $3
  GROUP BY arm, user_id
)
SELECT c.arm,
       sum(CASE WHEN u.d = c.d0 THEN 1 ELSE 0 END) AS cohort_users,
       sum(CASE WHEN u.d = c.d0 + INTERVAL '1 day' THEN 1 ELSE 0 END) AS retained_users
FROM cohort c
JOIN user_days u ON u.arm = c.arm AND u.user_id = c.user_id
GROUP BY c.arm
ORDER BY c.arm
