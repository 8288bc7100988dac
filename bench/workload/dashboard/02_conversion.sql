-- Conversion per arm: distinct purchasers / distinct users.
SELECT arm,
       count(DISTINCT user_id) AS users,
       count(DISTINCT CASE WHEN action = 'purchase' THEN user_id END) AS purchasers,
       CAST(count(DISTINCT CASE WHEN action = 'purchase' THEN user_id END) AS DOUBLE PRECISION)
         / count(DISTINCT user_id) AS conversion
FROM abtest
WHERE experiment_id = $1 AND event_time >= $2 AND event_time < $3
GROUP BY arm
ORDER BY arm
