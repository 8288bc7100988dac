-- Events per arm on item pages (prefix LIKE on the URL).
SELECT arm, count(*) AS events
FROM abtest
WHERE experiment_id = $1 AND event_time >= $2 AND event_time < $3
  AND page_url LIKE '/item/%'
GROUP BY arm
ORDER BY arm
