-- Welch t-test inputs per arm over purchase amounts: n, sum, sum of squares
-- (mean = s/n, variance = (ss - s*s/n) / (n - 1)).
SELECT arm,
       count(amount) AS n,
       sum(amount) AS sum_amount,
       sum(amount * amount) AS sum_sq_amount
FROM abtest
WHERE experiment_id = $1 AND event_time >= $2 AND event_time < $3
  AND action = 'purchase'
GROUP BY arm
ORDER BY arm
